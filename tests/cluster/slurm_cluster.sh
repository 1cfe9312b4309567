#!/bin/bash
# A single-node Slurm cluster from Debian's slurmctld, slurmd and munge, for the cluster tests (issue 43): every
# daemon's state, sockets, logs and spool under one directory, the daemons stopped by the process ids they wrote.
#   slurm_cluster.sh start DIR   starts munged, slurmctld and slurmd; prints "export SLURM_CONF=DIR/slurm.conf"
#   slurm_cluster.sh stop DIR    stops the daemons started in DIR (by their pid files), nothing else
#   slurm_cluster.sh check       exit 0 when it can run here (root and the daemons installed), else prints why
# Must run as root (SlurmUser=root; munged keeps its key and socket in DIR).
set -euo pipefail

why_not() {
    if [ "$(id -u)" != 0 ]; then echo "not root (the single-node cluster runs its daemons as root)"; return; fi
    local missing=""
    for program in munged slurmctld slurmd sbatch squeue scancel scontrol; do
        command -v "$program" >/dev/null 2>&1 || missing="$missing $program"
    done
    if [ -n "$missing" ]; then
        echo "missing:$missing (packaging/install-deps.sh installs slurmctld, slurmd, slurm-client and munge)"
    fi
}

start() {
    local dir; dir=$(realpath -m "$1")
    mkdir -p "$dir"/{munge,spool/ctld,spool/d,log,run}
    chmod 700 "$dir/munge"
    # A munge key of our own: the cluster's credentials never mix with a munged the machine may run.
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge/munge.key"
    munged --force --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
        --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed"
    local host; host=$(hostname -s)
    local cpus; cpus=$(nproc)
    local memory; memory=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
    local port; port=$(( 20000 + RANDOM % 20000 ))
    cat > "$dir/slurm.conf" <<CONF
ClusterName=mismatchtest
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
SlurmctldPort=$port
SlurmdPort=$((port + 1))
StateSaveLocation=$dir/spool/ctld
SlurmdSpoolDir=$dir/spool/d
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MpiDefault=none
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=600
KillWait=5
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -i
    slurmd
    # Ready when the node takes jobs (seconds).
    for _ in $(seq 1 60); do
        if sinfo -h -o '%t' 2>/dev/null | grep -qE '^(idle|mix|alloc)'; then
            echo "export SLURM_CONF=$dir/slurm.conf"
            return 0
        fi
        sleep 0.5
    done
    echo "slurm_cluster.sh: the node did not come up in 30 s; logs in $dir/log" >&2
    stop "$dir"
    return 1
}

stop() {
    local dir; dir=$(realpath -m "$1")
    for daemon in slurmd slurmctld munged; do
        local pidfile="$dir/run/$daemon.pid"
        [ -s "$pidfile" ] || continue
        local pid; pid=$(cat "$pidfile")
        kill "$pid" 2>/dev/null || true
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$pidfile"
    done
}

case "${1:-}" in
    check) reason=$(why_not); if [ -n "$reason" ]; then echo "$reason"; exit 1; fi ;;
    start) reason=$(why_not); if [ -n "$reason" ]; then echo "$reason" >&2; exit 1; fi; start "${2:?start DIR}" ;;
    stop) stop "${2:?stop DIR}" ;;
    *) echo "usage: $0 check | start DIR | stop DIR" >&2; exit 2 ;;
esac
