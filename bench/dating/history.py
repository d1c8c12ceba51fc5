#!/usr/bin/env python3
"""Every side-by-side dating comparison kept under bench/results, as one markdown table with
the medians of its ratios: one run's overload tail moves as much as the versions differ, so
the spread over runs says more than the latest. Then the A/A checks (`run.py --aa`: one version
on both sides), whose ratios are what the rig alone contributes: the comparisons are read
against them.

    python3 bench/dating/history.py [RESULTS_DIR]
"""
import glob
import json
import os
import statistics
import sys

RATIOS = ["throughput_ratio_expected", "throughput_ratio_overload", "p99_ratio_expected",
          "p99_ratio_overload", "cpu_per_message_ratio_expected", "cpu_per_message_ratio_overload",
          # from a capture (`run.py --capture`): microseconds, not SIPp's ~4-ms steps
          "p99_capture_ratio_expected", "p99_capture_ratio_overload"]


def is_aa(d):
    """An A/A check (`run.py --aa`): its runs are the same service's sides A and B."""
    return any(k.endswith("/A") for k in d.get("runs") or {})


def runs(results, want_aa=False):
    found = []
    for path in sorted(glob.glob(os.path.join(results, "dating*.json"))):
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            print("skipped %s: %s" % (path, e), file=sys.stderr)
            continue
        aa = is_aa(d)
        if aa != want_aa or (not aa and (not d.get("side_by_side") or d.get("mode") != "full")):
            continue
        m = d.get("machine") or {}
        cpu = m.get("cpu_model") or ""
        host = "AMD" if "AMD" in cpu else "Intel" if "Intel" in cpu else cpu
        if d.get("dating_cpus"):  # both dating tandems on the same CPUs (`--dating-cpus`)
            host += ", CPU " + ",".join(map(str, d["dating_cpus"]))
        if d.get("side_by_side_first") == "dating_manual":  # `--swap-sides`
            host += ", swapped"
        if aa:
            host += ", A/A " + d.get("service", "?")
        if d.get("binary"):  # not target/release/tandem (`--binary`, e.g. the PGO build)
            host += ", " + d["binary"]
        found.append({"file": os.path.basename(path), "generated": d.get("generated", ""),
                      "git": m.get("git", ""), "host": host,
                      "capacity": d.get("capacity_executions") or (d.get("loads") or {}).get("overload"),
                      "invariants": d.get("invariants_ok") if not aa else aa_invariants(d),
                      **{k: d.get(k) for k in RATIOS}})
    # `dating.json` is the latest run, usually also kept under an archive name: one run once
    # (the archive's name kept, it says more).
    seen = {}
    for r in found:
        if r["generated"] not in seen or seen[r["generated"]]["file"] == "dating.json":
            seen[r["generated"]] = r
    return sorted(seen.values(), key=lambda r: r["generated"])


def aa_invariants(d):
    # A side without an invariants record was not checked: not OK.
    return all((r.get("invariants") or {}).get("ok", False) for r in (d.get("runs") or {}).values() if r)


def fmt(v, digits=3):
    return "–" if v is None else ("%.*f" % (digits, v))


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "results")
    table(runs(results))
    aa = runs(results, want_aa=True)
    if aa:
        print()
        print("A/A checks (the same version on both sides, A in the driver's main thread):")
        print()
        table(aa)


def table(rows):
    print("| generated (UTC) | tandem | host | capacity | throughput exp / over | p99 exp / over "
          "| p99 from a capture exp / over | CPU/msg exp / over | invariants | file |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %s | %s | %s | %s / %s | %s / %s | %s / %s | %s / %s | %s | %s |" % (
            r["generated"][:16].replace("T", " "), r["git"], r["host"], r["capacity"],
            fmt(r["throughput_ratio_expected"]), fmt(r["throughput_ratio_overload"]),
            fmt(r["p99_ratio_expected"]), fmt(r["p99_ratio_overload"]),
            fmt(r["p99_capture_ratio_expected"]), fmt(r["p99_capture_ratio_overload"]),
            fmt(r["cpu_per_message_ratio_expected"]), fmt(r["cpu_per_message_ratio_overload"]),
            "OK" if r["invariants"] else "FAILED", r["file"]))
    print()
    for k in RATIOS:
        vals = [r[k] for r in rows if r[k] is not None]
        if vals:
            print("- %s: median %s, min %s, max %s over %d runs" % (
                k, fmt(statistics.median(vals)), fmt(min(vals)), fmt(max(vals)), len(vals)))


if __name__ == "__main__":
    main()
