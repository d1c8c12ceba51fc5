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
import math
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


def runs(results, want_aa=False, contract="dating"):
    """The kept runs of one kind: A/A checks or comparisons, the latter those whose contract
    version ran on `contract` (`dating`, the engine; `dating_compiled`, the compiled contract:
    `run.py --contract-service`)."""
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
        if not aa and d.get("contract_service", "dating") != contract:
            continue
        m = d.get("machine") or {}
        cpu = m.get("cpu_model") or ""
        host = "AMD" if "AMD" in cpu else "Intel" if "Intel" in cpu else cpu
        if d.get("dating_cpus"):  # both dating tandems on the same CPUs (`--dating-cpus`)
            host += ", CPU " + ",".join(map(str, d["dating_cpus"]))
        swapped = d.get("side_by_side_first") == "dating_manual"  # `--swap-sides`
        if swapped:
            host += ", swapped"
        if any((r or {}).get("start_skew_s") is not None for r in (d.get("runs") or {}).values()):
            host += ", synced"  # both sides' loads started together (a barrier, since ff4001b)
        if aa:
            host += ", A/A " + d.get("service", "?")
        if d.get("binary"):  # not target/release/tandem (`--binary`, e.g. the PGO build)
            host += ", " + d["binary"]
        row = {"file": os.path.basename(path), "generated": d.get("generated", ""),
               "git": m.get("git", ""), "host": host, "swapped": swapped,
               "capacity": d.get("capacity_executions") or (d.get("loads") or {}).get("overload"),
               "invariants": d.get("invariants_ok") if not aa else aa_invariants(d),
               **{k: d.get(k) for k in RATIOS}}
        orders = d.get("ratios_by_order")
        if orders:
            # `run.py --both-orders`: one row per order (its headline ratios are their geometric
            # means), so that each order counts where the single-order runs count
            for order, swapped in (("dating_first", False), ("dating_manual_first", True)):
                found.append({**row, "host": host + ", both orders" + (", swapped" if swapped else ""),
                              "swapped": swapped, **{k: orders[order].get(k) for k in RATIOS}})
        else:
            found.append(row)
    # `dating.json` is the latest run, usually also kept under an archive name: one run once
    # (the archive's name kept, it says more).
    seen = {}
    for r in found:
        key = (r["generated"], r["swapped"])
        if key not in seen or seen[key]["file"] == "dating.json":
            seen[key] = r
    return sorted(seen.values(), key=lambda r: (r["generated"], r["swapped"]))


def aa_invariants(d):
    # A side without an invariants record was not checked: not OK.
    return all((r.get("invariants") or {}).get("ok", False) for r in (d.get("runs") or {}).values() if r)


def fmt(v, digits=3):
    return "–" if v is None else ("%.*f" % (digits, v))


def main():
    results = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "results")
    ab = runs(results)
    table(ab)
    by_order(ab)
    compiled = runs(results, contract="dating_compiled")
    if compiled:
        print()
        print("The contract compiled to Rust (`dating_compiled`, decision 0008) on the contract version's side:")
        print()
        table(compiled)
        by_order(compiled)
    aa = runs(results, want_aa=True)
    if aa:
        print()
        print("A/A checks (the same version on both sides, A in the driver's main thread):")
        print()
        table(aa)
        side_bias(aa)


# The p99 ratios read by the side a version ran on: the rig's A/A checks have favoured the first
# side (the driver's main thread), so a median over runs that put the contract version first more
# often than not is kind to it.
ORDERED = ["p99_capture_ratio_expected", "p99_capture_ratio_overload", "p99_ratio_expected", "p99_ratio_overload"]


def by_order(rows):
    """Each p99 ratio's median over the runs with the contract version first and over those with
    the hand-optimized version first (`--swap-sides`), and the geometric mean of the two: a side
    bias that scales one order's ratios up scales the other's down, and cancels there."""
    print()
    for k in ORDERED:
        first = [r[k] for r in rows if r[k] is not None and not r["swapped"]]
        swapped = [r[k] for r in rows if r[k] is not None and r["swapped"]]
        if not first or not swapped:
            continue
        a, b = statistics.median(first), statistics.median(swapped)
        print("- %s by order: contract first median %s (%d runs), hand-optimized first %s (%d runs); "
              "geometric mean of the two %s" % (k, fmt(a), len(first), fmt(b), len(swapped), fmt(math.sqrt(a * b))))


def side_bias(rows):
    """How often the A/A checks' first side had the shorter tail (ratio below 1), with the sign
    test's one-sided p-value were the sides alike."""
    print()
    for k in ORDERED:
        vals = [r[k] for r in rows if r[k] is not None and r[k] != 1.0]
        if vals:
            below = sum(1 for v in vals if v < 1.0)
            print("- %s: first side's p99 shorter in %d of %d runs (sign test: p = %.2g were the sides alike)" % (
                k, below, len(vals), binom_tail(len(vals), below)))


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
            print("- %s: median %s%s, min %s, max %s over %d runs%s" % (
                k, fmt(statistics.median(vals)), ci_text(vals), fmt(min(vals)), fmt(max(vals)),
                len(vals), sign_text(k, vals)))


def binom_tail(n, k):
    """P(X >= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k, n + 1)) / 2 ** n


def median_ci(vals, conf=0.95):
    """A distribution-free confidence interval for the median (order statistics: the number
    of runs below the median is Binomial(n, 1/2)), or None when there are too few runs for one
    at `conf` (fewer than 6 at 95 %). Assumes only that the runs are independent draws of one
    distribution, which runs on several hosts and commits are only roughly."""
    xs = sorted(vals)
    n = len(xs)
    # the largest k with P(X < k) <= (1 - conf) / 2: [x_(k), x_(n-k+1)], 1-based
    # (P(X < k) = P(X >= n - k + 1) by symmetry: exact, no 1 - p)
    k = 0
    while k + 1 <= n // 2 and binom_tail(n, n - k) <= (1 - conf) / 2:
        k += 1
    if k == 0:
        return None
    return xs[k - 1], xs[n - k]


def ci_text(vals):
    ci = median_ci(vals)
    return "" if ci is None else " (95 %% CI %s-%s)" % (fmt(ci[0]), fmt(ci[1]))


# What each ratio is tested against: the goal (throughput >= 1.00, p99 <= 1.05; CPU per
# message has no goal, 1.00 is parity).
GOALS = {"throughput": (1.00, "below"), "p99": (1.05, "above"), "cpu": (1.00, "above")}


def sign_text(k, vals):
    """How many runs miss the goal's bound, and the sign test's one-sided p-value: the chance of
    that many or more if the median met the bound (runs equal to it left out)."""
    bound, side = GOALS[k.split("_")[0]]
    miss = sum(1 for v in vals if (v > bound if side == "above" else v < bound))
    n = sum(1 for v in vals if v != bound)
    if not n:
        return ""
    return "; %d of %d runs %s %.2f (sign test: p = %.2g were the median at or %s it)" % (
        miss, n, side, bound, binom_tail(n, miss), "above" if side == "below" else "below")


if __name__ == "__main__":
    main()
