// Slurm's command-line tools as core/jobs/cluster.cpp uses them: a program run with its output captured, the
// profile file, the sbatch scripts, and the states squeue / sacct / scontrol report.
#include "core/jobs/cluster_internal.h"

#include "core/common/error.h"
#include "core/common/file_io.h"
#include "core/common/shell_quote.h"
#include "core/common/input_limits.h"
#include "core/common/yaml_mapping.h"
#include "core/common/yaml_scalar.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <poll.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace mismatch::jobs::cluster {

bool onPath(const std::string& program)
{
    const char* path = std::getenv("PATH");
    std::stringstream directories(path ? path : "/usr/bin:/bin");
    std::string directory;
    while (std::getline(directories, directory, ':')) {
        if (!directory.empty() && ::access((fs::path(directory) / program).c_str(), X_OK) == 0) {
            return true;
        }
    }
    return false;
}

ProgramOutput runProgram(const std::vector<std::string>& argv, const std::string& workingDirectory)
{
    int out[2];
    int err[2];
    if (::pipe(out) != 0 || ::pipe(err) != 0) {
        throw Error(argv.front() + ": cannot make a pipe: " + std::strerror(errno));
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
        throw Error(argv.front() + ": cannot start: " + std::strerror(errno));
    }
    if (pid == 0) {
        ::dup2(out[1], STDOUT_FILENO);
        ::dup2(err[1], STDERR_FILENO);
        ::close(out[0]);
        ::close(err[0]);
        ::close(out[1]);
        ::close(err[1]);
        if (!workingDirectory.empty() && ::chdir(workingDirectory.c_str()) != 0) {
            ::_exit(126);
        }
        std::vector<char*> args;
        for (const std::string& arg : argv) {
            args.push_back(const_cast<char*>(arg.c_str()));
        }
        args.push_back(nullptr);
        ::execvp(args.front(), args.data());
        ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    ProgramOutput result;
    pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
    std::string* texts[2] = {&result.out, &result.err};
    int open = 2;
    char buffer[4096];
    while (open > 0) {
        if (::poll(fds, 2, -1) < 0 && errno != EINTR) {
            break;
        }
        for (int i = 0; i < 2; ++i) {
            if (fds[i].fd >= 0 && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
                const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
                if (n > 0) {
                    texts[i]->append(buffer, static_cast<std::size_t>(n));
                } else if (n == 0 || errno != EINTR) {
                    ::close(fds[i].fd);
                    fds[i].fd = -1;
                    --open;
                }
            }
        }
    }
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return result;
}

namespace {

std::int64_t positiveInteger(const io::YamlMappingReader& reader, const io::YamlEntry& entry, std::int64_t low)
{
    if (io::scalarKind(entry.value) != io::ScalarKind::Integer) {
        reader.fail(entry.valueLocation, "expected a whole number, got " + io::kindName(entry.value));
    }
    const auto value = entry.value.as<std::int64_t>();
    if (value < low || value > 100000) {
        reader.fail(entry.valueLocation,
            "expected a whole number in " + std::to_string(low) + "..100000, got " + std::to_string(value));
    }
    return value;
}

std::vector<std::string> stringList(const io::YamlMappingReader& reader, const io::YamlEntry& entry)
{
    if (!entry.value.IsSequence()) {
        reader.fail(entry.valueLocation, "expected a list of strings, got " + io::kindName(entry.value));
    }
    std::vector<std::string> values;
    for (std::size_t i = 0; i < entry.value.size(); ++i) {
        io::YamlEntry element {entry.key, entry.keyNode, entry.value[i],
            io::locate(entry.value[i], entry.keyLocation.keyPath + "[" + std::to_string(i) + "]"),
            io::locate(entry.value[i], entry.keyLocation.keyPath + "[" + std::to_string(i) + "]")};
        const std::string text = reader.stringValue(element);
        if (text.find('\n') != std::string::npos) {
            reader.fail(element.valueLocation, "expected one line, got a line break");
        }
        values.push_back(text);
    }
    return values;
}

// A value written into an #SBATCH line: one word of letters, digits and the punctuation Slurm's values use.
std::string sbatchWord(const io::YamlMappingReader& reader, const io::YamlEntry& entry)
{
    const std::string text = reader.stringValue(entry);
    if (text.empty() || text.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.:,+@%=")
            != std::string::npos) {
        reader.fail(entry.valueLocation,
            "expected one word (letters, digits and _ - . : , + @ % =), got '" + text + "'");
    }
    return text;
}

} // namespace

Profile defaultProfile()
{
    Profile profile;
    // The CLI itself, or the one beside the GUI (both installed in one directory, as in the build tree); else
    // `mismatch` as the nodes' PATH finds it.
    std::error_code error;
    const fs::path self = fs::read_symlink("/proc/self/exe", error);
    const fs::path cli = error ? fs::path() : (self.filename() == "mismatch" ? self : self.parent_path() / "mismatch");
    profile.mismatch = !cli.empty() && fs::exists(cli, error) ? cli.string() : "mismatch";
    return profile;
}

Profile loadProfile(const std::string& path)
{
    const std::string text = readInputFile(path, limits::kConfigFile, "cluster profile");
    const YAML::Node root = io::loadYaml(text, path);
    const io::YamlMappingReader reader([&path](const io::SourceLocation& where, const std::string& detail) {
        throw InputError(path, io::lineColumn(where), detail);
    });
    Profile profile = defaultProfile();
    profile.source = fs::absolute(path).string();
    const auto entries = reader.entries(root, io::locate(root, ""),
        {"partition", "account", "time", "gpus", "gpu_option", "gres_type", "cpus", "memory", "requeue", "sbatch",
            "setup", "mismatch", "advance_time", "advance_cpus"});
    for (const io::YamlEntry& entry : entries) {
        if (entry.key == "partition") {
            profile.partition = sbatchWord(reader, entry);
        } else if (entry.key == "account") {
            profile.account = sbatchWord(reader, entry);
        } else if (entry.key == "time") {
            profile.time = sbatchWord(reader, entry);
        } else if (entry.key == "advance_time") {
            profile.advanceTime = sbatchWord(reader, entry);
        } else if (entry.key == "gpus") {
            profile.gpus = positiveInteger(reader, entry, 0);
        } else if (entry.key == "cpus") {
            profile.cpus = positiveInteger(reader, entry, 1);
        } else if (entry.key == "advance_cpus") {
            profile.advanceCpus = positiveInteger(reader, entry, 1);
        } else if (entry.key == "gpu_option") {
            profile.gpuOption = reader.stringValue(entry);
            if (profile.gpuOption != "gpus-per-task" && profile.gpuOption != "gres") {
                reader.fail(entry.valueLocation, "expected gpus-per-task or gres, got '" + profile.gpuOption + "'");
            }
        } else if (entry.key == "gres_type") {
            profile.gresType = sbatchWord(reader, entry);
        } else if (entry.key == "memory") {
            profile.memory = sbatchWord(reader, entry);
        } else if (entry.key == "requeue") {
            if (io::scalarKind(entry.value) != io::ScalarKind::Boolean) {
                reader.fail(entry.valueLocation, "expected true or false, got " + io::kindName(entry.value));
            }
            profile.requeue = entry.value.as<bool>();
        } else if (entry.key == "sbatch") {
            profile.sbatch = stringList(reader, entry);
            for (const std::string& option : profile.sbatch) {
                if (option.rfind("--", 0) != 0 && option.rfind("-", 0) != 0) {
                    reader.fail(entry.valueLocation, "each entry is an sbatch option such as \"--qos=normal\", got '"
                        + option + "'");
                }
            }
        } else if (entry.key == "setup") {
            profile.setup = stringList(reader, entry);
        } else if (entry.key == "mismatch") {
            profile.mismatch = reader.stringValue(entry);
        }
    }
    return profile;
}

namespace {

void addOption(std::string& text, const std::string& option)
{
    text += "#SBATCH " + option + "\n";
}

} // namespace

std::string sbatchScript(const ScriptRequest& request)
{
    const Profile& p = request.profile;
    std::string text = "#!/bin/bash\n# " + request.comment + "\n# Written by `mismatch submit` (core/jobs/cluster.h); "
        "submitted by submit-" + request.submitTag + ".sh with its dependencies.\n";
    addOption(text, "--job-name=" + request.jobName);
    addOption(text, "--output=" + (fs::path(request.directory) / "logs" / request.outputPattern).string());
    if (!request.arrayIndices.empty()) {
        addOption(text, "--array=" + request.arrayIndices);
    }
    if (!p.partition.empty()) {
        addOption(text, "--partition=" + p.partition);
    }
    if (!p.account.empty()) {
        addOption(text, "--account=" + p.account);
    }
    const bool merging = request.advance && !request.advanceRunsAJob; // the merge and a decision: light
    const std::string time = merging ? p.advanceTime : p.time;
    if (!time.empty()) {
        addOption(text, "--time=" + time);
    }
    addOption(text, "--ntasks=1");
    addOption(text, "--cpus-per-task=" + std::to_string(merging ? p.advanceCpus : p.cpus));
    addOption(text, "--mem=" + request.memory);
    if (!merging && p.gpus > 0) {
        addOption(text,
            p.gpuOption == "gres" ? "--gres=gpu:" + (p.gresType.empty() ? "" : p.gresType + ":") + std::to_string(p.gpus)
                                  : "--gpus-per-task=" + std::to_string(p.gpus));
    }
    if (!request.advance) {
        addOption(text, p.requeue ? "--requeue" : "--no-requeue");
    }
    for (const std::string& option : p.sbatch) {
        addOption(text, option);
    }
    text += "set -euo pipefail\n";
    for (const std::string& line : p.setup) {
        text += line + "\n";
    }
    text += request.body;
    return text;
}

std::optional<std::string> slurmJobState(const std::string& jobId)
{
    // Whether a tool answered about the job (found it, or said it has no such job), rather than failing to reach
    // the controller or being absent.
    bool answered = false;
    const auto knowsNoSuchJob = [](const ProgramOutput& output) {
        return output.err.find("Invalid job id") != std::string::npos;
    };
    // squeue first (jobs still queued or running; -r: one line per array task).
    if (onPath("squeue")) {
        const ProgramOutput queued = runProgram({"squeue", "-h", "-r", "-o", "%i %T", "-j", jobId});
        answered = queued.exitCode == 0 || knowsNoSuchJob(queued);
        std::istringstream lines(queued.exitCode == 0 ? queued.out : std::string());
        std::string id;
        std::string state;
        while (lines >> id >> state) {
            if (id == jobId) {
                return state;
            }
        }
    }
    // sacct when accounting is kept; scontrol while the controller still remembers the job (MinJobAge).
    if (onPath("sacct")) {
        const ProgramOutput accounted = runProgram({"sacct", "-n", "-P", "-X", "-o", "JobID,State", "-j", jobId});
        std::istringstream lines(accounted.exitCode == 0 ? accounted.out : std::string());
        answered = answered || accounted.exitCode == 0;
        std::string line;
        while (std::getline(lines, line)) {
            const std::size_t bar = line.find('|');
            if (bar != std::string::npos && line.substr(0, bar) == jobId) {
                const std::string state = line.substr(bar + 1);
                return state.substr(0, state.find(' ')); // "CANCELLED by 0" -> CANCELLED
            }
        }
    }
    if (onPath("scontrol")) {
        const ProgramOutput shown = runProgram({"scontrol", "-o", "show", "job", jobId});
        answered = answered || shown.exitCode == 0 || knowsNoSuchJob(shown);
        const std::size_t at = shown.out.find("JobState=");
        if (shown.exitCode == 0 && at != std::string::npos) {
            const std::size_t start = at + 9;
            return shown.out.substr(start, shown.out.find(' ', start) - start);
        }
    }
    return answered ? std::optional<std::string>(std::string()) : std::nullopt;
}

UnitState unitStateOf(const std::string& slurmState)
{
    if (slurmState == "RUNNING" || slurmState == "COMPLETING" || slurmState == "CONFIGURING"
        || slurmState == "STAGE_OUT") {
        return UnitState::Running;
    }
    if (slurmState.empty() || slurmState == "PENDING" || slurmState == "REQUEUED" || slurmState == "REQUEUE_HOLD"
        || slurmState == "REQUEUE_FED" || slurmState == "RESIZING" || slurmState == "SUSPENDED"
        || slurmState == "COMPLETED") {
        return UnitState::Pending; // COMPLETED without a result: the caller says what is missing
    }
    return UnitState::Failed; // CANCELLED, FAILED, TIMEOUT, NODE_FAIL, PREEMPTED, OUT_OF_MEMORY, BOOT_FAIL, DEADLINE
}

std::vector<std::string> submitScript(const std::string& script, const std::string& directory)
{
    if (!onPath("sbatch")) {
        throw Error("sbatch is not on PATH: this machine cannot submit to Slurm (write the scripts with --dry-run, then "
                    "run `mismatch cluster resume " + directory + "` on a machine that has sbatch, which submits them "
                    "and records their job ids)");
    }
    const ProgramOutput output = runProgram({"bash", script}, directory);
    if (output.exitCode != 0) {
        throw Error(script + " failed (exit " + std::to_string(output.exitCode) + "): " + output.err + output.out);
    }
    std::vector<std::string> lines;
    std::istringstream text(output.out);
    std::string line;
    while (std::getline(text, line)) {
        if (!line.empty()) {
            lines.push_back(line);
        }
    }
    return lines;
}

} // namespace mismatch::jobs::cluster
