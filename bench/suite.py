#!/usr/bin/env python3
"""The telecom service benchmark suite (issue 5): every scenario over UDP and TCP, Tandem's
Proxy 200 side by side with Kamailio's, a fixed-rate run at 80 % of each scenario's
latency-criterion rate, and the memory scale run.

For each scenario and transport, bench/find_max_rate.py runs the step load (same rates for
Tandem and Kamailio); then one step at 80 % of the rate that met the latency criterion gives
the p50/p95/p99 and the response-time histogram there. bench/memory_scale.py measures RSS
per established call.

Writes bench/results/suite.json (per scenario and transport: maximum throughput, latency-
criterion rate, p50/p95/p99 at 80 % of it, cpu_us_per_call per rate; Kamailio's Proxy 200
figures under "kamailio"; the Tandem/Kamailio CPU ratio per rate; rss_bytes_per_call),
bench/results/suite.md and PNG plots (matplotlib) next to them. The load generator's own limit
is reported per step (SIPp callers used, their CPU, calls set up per second, whether that reached
the offered rate) and summed up in suite.md's "Load generator" table; a step faster than
--uac-max-rate (5,000 calls/s) is split over several SIPp callers by find_max_rate.py.

    python3 bench/suite.py                 # full: 10 s steps, +1000 calls/s
    python3 bench/suite.py --quick         # short smoke run (numbers not meaningful)
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import find_max_rate as fmr  # noqa: E402

TANDEM_SCENARIOS = ["proxy200", "uas", "b2bua_nt", "b2bua_1t", "b2bua_2t"]


def run_fmr(args, scenario, transport, name, start, step, max_steps, extra=()):
    cmd = [sys.executable, os.path.join(HERE, "find_max_rate.py"), "--binary", args.binary, "--scenario", scenario,
           "--transport", transport, "--start", str(start), "--step", str(step), "--duration", str(args.duration),
           "--max-rate", str(args.max_rate), "--pause", str(args.pause), "--out-dir", args.work_dir, "--name", name]
    if max_steps:
        cmd += ["--max-steps", str(max_steps)]
    cmd += ["--uac-max-rate", str(args.uac_max_rate)]
    if args.uac_instances:
        cmd += ["--uac-instances", str(args.uac_instances)]
    cmd += list(extra)
    print("\n$ " + " ".join(os.path.relpath(c, REPO) if c.startswith(REPO) else c for c in cmd), flush=True)
    subprocess.run(cmd, check=False)
    path = os.path.join(args.work_dir, name + ".json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        report = json.load(f)
    return report["scenarios"][0] if report.get("scenarios") else None


def histogram(raw_dir, rate):
    """Setup delays (ms) of the fixed-rate step, from SIPp's per-call rtt trace."""
    step_dir = os.path.join(raw_dir, "rate-%05d" % rate)
    return sorted(v for _, v in fmr.read_rtt(step_dir))


def summarize(result, at80):
    steps = result.get("steps", []) if result else []
    out = {
        "max_throughput_cps": result.get("max_throughput_cps") if result else None,
        "latency_criterion_cps": result.get("latency_criterion_cps") if result else None,
        "stop_reason": (result.get("stop_reason") or result.get("error")) if result else "not run",
        "cpu_us_per_call": {str(s["rate"]): s["cpu_us_per_call"] for s in steps},
        "steps": [{k: s.get(k) for k in ("rate", "success_ratio", "p50_ms", "p95_ms", "p99_ms", "share_le_25ms",
                                         "share_le_50ms", "cpu_us_per_call", "tandem_rss_kib", "retransmissions",
                                         "setup_rate_achieved", "sipp_uac_cpu_share", "generator_limited",
                                         "generator_reached_rate", "uac_instances", "uac_rates",
                                         "sipp_uac_cpu_share_per_instance", "machine_cpu_share")}
                  for s in steps],
    }
    if at80:
        s = at80["step"]
        out["at_80pct"] = {"rate": s["rate"], "success_ratio": s["success_ratio"], "p50_ms": s["p50_ms"],
                           "p95_ms": s["p95_ms"], "p99_ms": s["p99_ms"], "cpu_us_per_call": s["cpu_us_per_call"],
                           "retransmissions_per_call": (s["retransmissions"] or 0) / max(1, s["calls"]),
                           "uac_instances": s.get("uac_instances", 1),
                           "sipp_uac_cpu_share": s.get("sipp_uac_cpu_share"),
                           "generator_reached_rate": s.get("generator_reached_rate")}
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(REPO, "target", "release", "tandem"))
    ap.add_argument("--transports", default="udp,tcp")
    ap.add_argument("--scenarios", default=",".join(TANDEM_SCENARIOS + ["kamailio200"]))
    ap.add_argument("--start", type=int, default=1000)
    ap.add_argument("--step", type=int, default=1000)
    ap.add_argument("--duration", type=int, default=10, help="seconds per step")
    ap.add_argument("--pause", type=float, default=2.0)
    ap.add_argument("--max-rate", type=int, default=14000)
    ap.add_argument("--memory-calls", type=int, default=100_000)
    ap.add_argument("--uac-max-rate", type=int, default=5000,
                    help="calls/s per SIPp caller: find_max_rate.py splits faster steps over several")
    ap.add_argument("--uac-instances", type=int, default=0, help="force this many SIPp callers per step")
    ap.add_argument("--quick", action="store_true", help="5 s steps, at most 2 steps, 5,000 calls in the memory run")
    ap.add_argument("--out-dir", default=os.path.join(HERE, "results"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="configuration override for every Tandem scenario of this run (recorded per scenario)")
    ap.add_argument("--merge", action="store_true",
                    help="update the existing <out-dir>/suite.json: replace only the scenarios and transports run "
                         "now, keep the rest (and the memory run, unless --memory-calls > 0 is given explicitly)")
    args = ap.parse_args(argv)
    args.binary = os.path.abspath(args.binary)
    max_steps = 0
    if args.quick:
        args.duration, args.pause, max_steps, args.memory_calls = 5, 1.0, 2, 5000
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    args.work_dir = os.path.join(args.out_dir, "raw", "suite-" + stamp)
    os.makedirs(args.work_dir, exist_ok=True)
    suite = {"started": datetime.datetime.now().isoformat(timespec="seconds"), "git_rev": fmr.git_rev(),
             "machine": fmr.machine(), "quick": args.quick,
             "parameters": {"start": args.start, "step": args.step, "duration_s": args.duration, "max_rate": args.max_rate,
                            "uac_max_rate": args.uac_max_rate, "uac_instances": args.uac_instances,
                            "success_min": fmr.SUCCESS_MIN,
                            "latency_criterion": "95 % of calls set up within 50 ms and 50 % within 25 ms"},
             "scenarios": {}, "kamailio": {}, "histograms": {}}
    base = "suite-quick" if args.quick else "suite"
    previous_path = os.path.join(args.out_dir, base + ".json")
    if args.merge and os.path.exists(previous_path):
        with open(previous_path) as f:
            previous = json.load(f)
        for key in ("scenarios", "kamailio", "histograms", "memory", "rss_bytes_per_call"):
            if key in previous:
                suite[key] = previous[key]
        # Results kept from an older run say which run made them (before per-scenario run
        # records, a merged file named only the latest run's commit for all of them).
        origin = previous.get("merged_into") or {"started": previous.get("started"), "git_rev": previous.get("git_rev")}
        kept = [x for v in suite.get("scenarios", {}).values() for x in v.values()]
        kept += [x for v in suite.get("kamailio", {}).values() for x in v.values()]
        for entry in kept:
            if isinstance(entry, dict) and not entry.get("run"):
                entry["run"] = {"started": origin.get("started"), "git_rev": origin.get("git_rev"), "set": []}
        suite["merged_into"] = {"started": previous.get("started"), "git_rev": previous.get("git_rev")}
    scenarios = [s for s in args.scenarios.split(",") if s]
    for transport in [t for t in args.transports.split(",") if t]:
        for scenario in scenarios:
            name = "%s-%s" % (scenario, transport)
            extra = sum((["--set", kv] for kv in args.set), []) if scenario != "kamailio200" else []
            result = run_fmr(args, scenario, transport, name, args.start, args.step, max_steps, extra)
            at80 = None
            crit = result and result.get("latency_criterion_cps")
            if crit:
                rate80 = max(100, int(round(0.8 * crit / 100.0)) * 100)
                r80 = run_fmr(args, scenario, transport, name + "-80pct", rate80, args.step, 1, extra)
                if r80 and r80.get("steps"):
                    at80 = {"step": r80["steps"][0]}
                    if transport == "udp":
                        lat = histogram(r80["raw_dir"], rate80)
                        suite["histograms"][scenario] = {"rate": rate80, "setup_ms": lat}
            summary = summarize(result, at80)
            summary["run"] = {"started": datetime.datetime.now().isoformat(timespec="seconds"), "git_rev": fmr.git_rev(),
                              "set": [] if scenario == "kamailio200" else list(args.set)}
            target = suite["kamailio"] if scenario == "kamailio200" else suite["scenarios"].setdefault(scenario, {})
            if scenario == "kamailio200":
                target.setdefault("proxy200", {})[transport] = summary
            else:
                target[transport] = summary
    # Tandem vs Kamailio, Proxy 200, at the rates both ran.
    suite["proxy200_vs_kamailio"] = {}
    for transport, k in suite["kamailio"].get("proxy200", {}).items():
        t = suite["scenarios"].get("proxy200", {}).get(transport)
        if not t:
            continue
        ratios = {}
        for rate, kc in k["cpu_us_per_call"].items():
            tc = t["cpu_us_per_call"].get(rate)
            if kc and tc:
                ratios[rate] = kc / tc
        p99 = {}
        for ks in k["steps"]:
            ts = next((s for s in t["steps"] if s["rate"] == ks["rate"]), None)
            if ts and ks["success_ratio"] >= fmr.SUCCESS_MIN:
                p99[str(ks["rate"])] = {"tandem": ts["p99_ms"], "kamailio": ks["p99_ms"]}
        suite["proxy200_vs_kamailio"][transport] = {
            "cpu_ratio_kamailio_over_tandem": ratios,
            "goal_cpu_ratio": 1.5,
            "latency_criterion_cps": {"tandem": t["latency_criterion_cps"], "kamailio": k["latency_criterion_cps"]},
            "p99_ms_by_rate": p99,
        }
    mem_path = os.path.join(args.work_dir, "memory.json")
    if not (args.merge and "--memory-calls" not in (argv if argv is not None else sys.argv)):
        print("\n$ memory scale run: %d calls" % args.memory_calls, flush=True)
        subprocess.run([sys.executable, os.path.join(HERE, "memory_scale.py"), "--binary", args.binary,
                        "--calls", str(args.memory_calls), "--json", mem_path], check=False)
    if os.path.exists(mem_path):
        with open(mem_path) as f:
            suite["memory"] = json.load(f)
        suite["rss_bytes_per_call"] = suite["memory"].get("rss_bytes_per_call")
    suite["finished"] = datetime.datetime.now().isoformat(timespec="seconds")
    with open(os.path.join(args.out_dir, base + ".json"), "w") as f:
        json.dump(suite, f, indent=1)
    plots = plot(suite, args.out_dir, base)
    with open(os.path.join(args.out_dir, base + ".md"), "w") as f:
        f.write(markdown(suite, plots))
    print("wrote %s.{json,md}%s" % (os.path.join(os.path.relpath(args.out_dir, REPO), base),
                                    " and " + ", ".join(plots) if plots else " (no plots: pip install matplotlib)"))
    return 0


def replot(out_dir, base):
    """Plots and markdown again from an existing <base>.json (no measurement)."""
    with open(os.path.join(out_dir, base + ".json")) as f:
        suite = json.load(f)
    plots = plot(suite, out_dir, base)
    with open(os.path.join(out_dir, base + ".md"), "w") as f:
        f.write(markdown(suite, plots))


def fmt(v, f="%.0f"):
    return "–" if v is None else f % v


def generator_lines(suite, rows):
    """The load generator's own limit per scenario and transport: SIPp callers and their CPU at
    the highest step, and the steps where they did not place the offered rate."""
    p = suite["parameters"]
    out = ["", "## Load generator", "",
           "Each step's rate is split over SIPp callers (%s). At the highest step: callers, their CPU "
           "(share of one core each), calls set up per second; then the steps whose setups stayed under "
           "90 %% of the offered rate (* = a caller had a whole core: generator-limited)." % (
               ("%d per step" % p["uac_instances"]) if p.get("uac_instances") else
               ("at most %s calls/s each" % p["uac_max_rate"]) if p.get("uac_max_rate") else
               "one per step in this run: it predates the split"), "",
           "| scenario | transport | highest step | callers | caller CPU | set up /s | offered rate not reached at |",
           "|---|---|---|---|---|---|---|"]
    for sc, tr, v in rows:
        steps = v.get("steps") or []
        if not steps:
            continue
        top = steps[-1]
        per = top.get("sipp_uac_cpu_share_per_instance") or [top.get("sipp_uac_cpu_share")]
        missed = ["%d%s" % (s["rate"], "*" if s.get("generator_limited") else "") for s in steps
                  if s.get("generator_limited") or not s.get(
                      "generator_reached_rate", (s.get("setup_rate_achieved") or 0) >= 0.9 * s["rate"])]
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            sc, tr, top["rate"], top.get("uac_instances", 1),
            " + ".join(fmt(100 * x if x is not None else None, "%.0f %%") for x in per),
            fmt(top.get("setup_rate_achieved")), ", ".join(missed) or "–"))
    return out


def markdown(suite, plots):
    m = suite["machine"]
    lines = ["# Telecom service benchmark suite", "",
             "Run %s → %s, tandem %s%s. Generated by `bench/suite.py`." % (
                 suite["started"], suite["finished"], suite.get("git_rev") or "?", " (QUICK: not meaningful)" if suite["quick"] else ""),
             "",
             "**Machine**: %s, %s cores, %s GiB, kernel %s, %s; SIPp, the server under test and (for proxy and B2BUA "
             "scenarios) the SIPp callee share these cores over loopback." % (
                 m.get("cpu_model"), m.get("nproc"), m.get("mem_total_gib"), m.get("kernel"), m.get("os")),
             "",
             "**Method**: step load from %d calls/s, +%d per %d s step, until < 95 %% of calls succeed or the latency "
             "criterion (95 %% of calls set up within 50 ms, 50 %% within 25 ms) is missed twice; then one step at 80 %% of "
             "the latency-criterion rate. Setup delay = INVITE → 200 OK at the SIPp caller (1 ms resolution). CPU per "
             "call = the server's utime+stime (all its processes) over the steady part of a step / calls set up then."
             % (suite["parameters"]["start"], suite["parameters"]["step"], suite["parameters"]["duration_s"]),
             "",
             "**Runs**: " + "; ".join(
                 "%s/%s %s%s" % (sc, tr, (v.get("run") or {}).get("git_rev") or suite.get("git_rev") or "?",
                                 (" with " + ", ".join((v.get("run") or {}).get("set") or [])) if (v.get("run") or {}).get("set") else "")
                 for sc, per in list(suite["scenarios"].items()) + [("kamailio200", suite["kamailio"].get("proxy200", {}))]
                 for tr, v in per.items()) + ".",
             "",
             "| scenario | transport | max throughput (≥ 95 % ok) | latency-criterion rate | at 80 %: rate | success | p50 | p95 | p99 ms | CPU µs/call | stop reason |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    rows = [(sc, tr, v) for sc, per in suite["scenarios"].items() for tr, v in per.items()]
    rows += [("kamailio proxy200", tr, v) for tr, v in suite["kamailio"].get("proxy200", {}).items()]
    for sc, tr, v in rows:
        a = v.get("at_80pct") or {}
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            sc, tr, fmt(v["max_throughput_cps"]), fmt(v["latency_criterion_cps"]), fmt(a.get("rate")),
            fmt(100 * a["success_ratio"], "%.2f %%") if a else "–", fmt(a.get("p50_ms")), fmt(a.get("p95_ms")),
            fmt(a.get("p99_ms")), fmt(a.get("cpu_us_per_call"), "%.1f"), v.get("stop_reason") or ""))
    lines += generator_lines(suite, rows)
    lines += ["", "## Proxy 200: Tandem vs Kamailio (same run, same rates)", ""]
    for tr, cmp_ in suite.get("proxy200_vs_kamailio", {}).items():
        lines += ["**%s**: latency-criterion rate Tandem %s vs Kamailio %s calls/s." % (
            tr.upper(), fmt(cmp_["latency_criterion_cps"]["tandem"]), fmt(cmp_["latency_criterion_cps"]["kamailio"])), "",
            "| rate | Kamailio/Tandem CPU per call (goal ≥ 1.5) | p99 Tandem | p99 Kamailio |", "|---|---|---|---|"]
        for rate in sorted(set(cmp_["cpu_ratio_kamailio_over_tandem"]) | set(cmp_["p99_ms_by_rate"]), key=int):
            p = cmp_["p99_ms_by_rate"].get(rate, {})
            lines.append("| %s | %s | %s | %s |" % (rate, fmt(cmp_["cpu_ratio_kamailio_over_tandem"].get(rate), "%.2f"),
                                                  fmt(p.get("tandem")), fmt(p.get("kamailio"))))
        lines.append("")
    mem = suite.get("memory")
    if mem:
        lines += ["## Memory", "",
                  "%d concurrent established calls on `uas`: RSS %.1f MiB (idle %.1f MiB), **%.0f bytes per call**; "
                  "goal (100,000 calls in < 1 GiB) met: %s." % (mem["concurrent_calls"], mem["rss_bytes"] / 2**20,
                                                                 mem["rss_idle_bytes"] / 2**20, mem["rss_bytes_per_call"] or 0,
                                                                 mem["goal_met"]), ""]
    for p in plots:
        lines.append("![%s](%s)" % (p, p))
    lines.append("")
    return "\n".join(lines)


def plot(suite, out_dir, base):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    made = []
    series = [(sc, tr, v) for sc, per in suite["scenarios"].items() for tr, v in per.items()]
    series += [("kamailio200", tr, v) for tr, v in suite["kamailio"].get("proxy200", {}).items()]
    if series:
        fig, axes = plt.subplots(1, 2, figsize=(13, 5))
        colors = plt.get_cmap("tab20").colors
        for i, (sc, tr, v) in enumerate(series):
            st = v["steps"]
            if not st:
                continue
            rates = [s["rate"] for s in st]
            style = {"marker": "o" if tr == "udp" else "s", "color": colors[i % len(colors)],
                     "linestyle": "--" if sc == "kamailio200" else "-"}
            axes[0].plot(rates, [s["rate"] * s["success_ratio"] for s in st], label="%s %s" % (sc, tr), **style)
            axes[1].plot(rates, [s["p99_ms"] for s in st], label="%s %s" % (sc, tr), **style)
        axes[0].plot([0, suite["parameters"]["max_rate"]], [0, suite["parameters"]["max_rate"]], "k:", lw=0.8)
        axes[0].set(xlabel="offered load (calls/s)", ylabel="successful calls/s", title="Throughput vs offered load")
        axes[1].set(xlabel="offered load (calls/s)", ylabel="p99 setup delay (ms)", yscale="log", title="p99 setup delay vs load")
        for ax in axes:
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.tight_layout()
        name = base + "-throughput.png"
        fig.savefig(os.path.join(out_dir, name), dpi=110)
        plt.close(fig)
        made.append(name)
    hist = suite.get("histograms") or {}
    if hist:
        fig, ax = plt.subplots(figsize=(8, 5))
        for sc, h in hist.items():
            if h["setup_ms"]:
                ax.hist(h["setup_ms"], bins=range(0, int(max(h["setup_ms"])) + 2), histtype="step",
                        label="%s at %d calls/s" % (sc, h["rate"]))
        ax.set(xlabel="setup delay (ms, SIPp resolution 1 ms)", ylabel="calls", yscale="log",
               title="Setup delay histogram at 80 % of the latency-criterion rate (UDP)")
        ax.legend(fontsize=8)
        fig.tight_layout()
        name = base + "-histogram.png"
        fig.savefig(os.path.join(out_dir, name), dpi=110)
        plt.close(fig)
        made.append(name)
    return made


if __name__ == "__main__":
    if sys.argv[1:2] == ["--replot"]:
        replot(os.path.join(HERE, "results"), sys.argv[2] if len(sys.argv) > 2 else "suite")
        sys.exit(0)
    sys.exit(main())
