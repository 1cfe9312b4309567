#!/usr/bin/env python3
"""Time to quality from two `mismatch runs show RUN --json` documents, baseline (BF16 synchronous) first.

Target: the baseline's quality Q at its last evaluation (lower Q is better). A run's time to quality is the
wall time (the `wall_time_s` of its step metrics, seconds since the run started) of its first evaluation with
Q <= target; speedup = baseline time / candidate time. Prints one JSON object; exits 1 when a document holds no
evaluations or no wall times."""
import json
import sys


def series(path):
    with open(path) as handle:
        document = json.load(handle)
    wall = {s["step"]: s.get("wall_time_s") for s in document.get("steps", []) if isinstance(s, dict)}
    rows = []
    for evaluation in document.get("evaluations", []):
        step = evaluation["step"]
        seconds = 0.0 if step == 0 else wall.get(step)
        if seconds is None:
            raise SystemExit(f"{path}: no wall time for step {step}")
        rows.append((step, evaluation["quality"], seconds))
    if not rows:
        raise SystemExit(f"{path}: no evaluations")
    return document.get("name", path), sorted(rows)


def first_reaching(rows, target):
    for step, quality, seconds in rows:
        if quality <= target:
            return {"step": step, "quality": quality, "wall_seconds": seconds}
    return None


def main():
    base_name, baseline = series(sys.argv[1])
    cand_name, candidate = series(sys.argv[2])
    target = baseline[-1][1]
    base_hit = first_reaching(baseline, target)
    cand_hit = first_reaching(candidate, target)
    speedup = None
    if base_hit and cand_hit and cand_hit["wall_seconds"] > 0:
        speedup = base_hit["wall_seconds"] / cand_hit["wall_seconds"]
    print(json.dumps({
        "target_quality": target,
        "target_from": f"{base_name} at its last evaluation (step {baseline[-1][0]})",
        "baseline": {"run": base_name, "reached": base_hit, "evaluations": baseline},
        "candidate": {"run": cand_name, "reached": cand_hit, "evaluations": candidate},
        "speedup": speedup,
        "note": "both run files say device: cuda:0 (student, teacher, rollout engine and AdamW on the GPU)",
    }))


if __name__ == "__main__":
    main()
