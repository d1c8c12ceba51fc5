#!/usr/bin/env python3
"""Proxy 200 CPU per call of several server variants, interleaved in one run.

Each variant is one `bench/find_max_rate.py --scenario proxy200` step at a fixed rate (a fresh
server and SIPp pair per round); the variants take turns round after round, so a noisy
neighbour hurts them alike. Prints and writes (bench/results/proxy-cpu-ab.{json,md}) the
median and spread of CPU microseconds per call and p99 setup delay per variant.

    python3 bench/proxy_cpu_ab.py --rate 3000 --rounds 3 \\
        --variant 'default=' \\
        --variant 'one-worker=env:TOKIO_WORKER_THREADS=1;set:container.executors=1' \\
        --variant 'kamailio=scenario:kamailio200'

    python3 bench/proxy_cpu_ab.py --rates 1000,3000,5000 --rounds 3 --ratio-to kamailio \
        --variant 'tandem=set:container.executors=1' --variant 'kamailio=scenario:kamailio200'

With --rates, every round runs every rate for every variant (rates and variants interleaved), and
--ratio-to NAME adds, per rate, NAME's median CPU per call over each other variant's: the
Proxy 200 goal's ratio (Kamailio / Tandem) measured side by side instead of in separate step
runs minutes apart.

A variant is NAME=ITEM;ITEM;... with items env:K=V (environment of the server), set:K=V
(passed as --set to tandem), bin:PATH (another tandem binary) and scenario:S (proxy200 or
kamailio200).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def parse_variant(text):
    name, _, spec = text.partition("=")
    v = {"name": name, "env": {}, "set": [], "scenario": "proxy200"}
    for item in filter(None, spec.split(";")):
        kind, _, value = item.partition(":")
        if kind == "env":
            k, _, val = value.partition("=")
            v["env"][k] = val
        elif kind == "set":
            v["set"].append(value)
        elif kind == "bin":
            v["binary"] = value
        elif kind == "scenario":
            v["scenario"] = value
        else:
            raise SystemExit("unknown variant item %r" % item)
    return v


def run_one(args, v, out_dir, rate):
    name = "ab-%s-%d" % (v["name"], rate)
    cmd = [sys.executable, os.path.join(HERE, "find_max_rate.py"), "--binary", v.get("binary", args.binary),
           "--scenario", v["scenario"], "--transport", args.transport, "--start", str(rate),
           "--step", "1000", "--max-steps", "1", "--duration", str(args.duration),
           "--out-dir", out_dir, "--name", name]
    if args.warm is not None:
        cmd += ["--warm", str(args.warm)]
    for s in v["set"]:
        cmd += ["--set", s]
    env = dict(os.environ, **v["env"])
    path = os.path.join(out_dir, name + ".json")
    # A run that writes no report must not be read as the previous round's.
    if os.path.exists(path):
        os.remove(path)
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    if not os.path.exists(path):
        print("  no report from %s at %d calls/s" % (v["name"], rate), flush=True)
        return None
    with open(path) as f:
        report = json.load(f)
    steps = [s for sc in report.get("scenarios", []) for s in sc.get("steps", [])]
    if not steps:
        return None
    s = steps[0]
    return {"cpu_us_per_call": s.get("cpu_us_per_call"), "cpu_system_us_per_call": s.get("cpu_system_us_per_call"),
            "p99_ms": s.get("p99_ms"),
            "success": s.get("success_ratio")}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--binary", default=os.path.join(ROOT, "target/release/tandem"))
    p.add_argument("--rate", type=int, default=3000)
    p.add_argument("--rates", default=None, help="comma-separated rates (overrides --rate)")
    p.add_argument("--ratio-to", default=None, help="variant whose CPU per call is divided by the others'")
    p.add_argument("--duration", type=int, default=15)
    p.add_argument("--warm", type=float, default=None,
                   help="seconds into each run before CPU is read (find_max_rate.py's --warm); e.g. 40 for "
                        "full transaction tables over UDP (32 s lifetimes)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--transport", default="udp", choices=["udp", "tcp"])
    p.add_argument("--variant", action="append", required=True)
    p.add_argument("--out", default=os.path.join(ROOT, "bench/results/proxy-cpu-ab"))
    args = p.parse_args()
    variants = [parse_variant(v) for v in args.variant]
    rates = [int(r) for r in args.rates.split(",")] if args.rates else [args.rate]
    results = {(rate, v["name"]): [] for rate in rates for v in variants}
    with tempfile.TemporaryDirectory(prefix="tandem-ab-") as out_dir:
        for r in range(args.rounds):
            for rate in rates:
                for v in variants:
                    res = run_one(args, v, out_dir, rate)
                    results[(rate, v["name"])].append(res)
                    print("round %d rate %d %-20s %s" % (r + 1, rate, v["name"], res), flush=True)
                    time.sleep(1)
    by_rate = {}
    for rate in rates:
        summary = {}
        for v in variants:
            rs = [x for x in results[(rate, v["name"])] if x and x["cpu_us_per_call"]]
            cpus = sorted(x["cpu_us_per_call"] for x in rs)
            sys_us = [x["cpu_system_us_per_call"] for x in rs if x.get("cpu_system_us_per_call") is not None]
            summary[v["name"]] = {
                "variant": v, "runs": results[(rate, v["name"])],
                "cpu_us_per_call_median": statistics.median(cpus) if cpus else None,
                "cpu_us_per_call_min": cpus[0] if cpus else None,
                "cpu_us_per_call_max": cpus[-1] if cpus else None,
                "p99_ms_median": statistics.median(x["p99_ms"] for x in rs) if rs else None,
                "cpu_system_us_per_call_median": statistics.median(sys_us) if sys_us else None,
            }
        ratios = {}
        ref = summary.get(args.ratio_to, {}).get("cpu_us_per_call_median") if args.ratio_to else None
        if ref:
            for name, sm in summary.items():
                if name != args.ratio_to and sm["cpu_us_per_call_median"]:
                    ratios[name] = ref / sm["cpu_us_per_call_median"]
        by_rate[rate] = {"variants": summary, "ratios": ratios, "ratio_to": args.ratio_to}
    machine = subprocess.run(["uname", "-a"], capture_output=True, text=True).stdout.strip()
    cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    doc = {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git": rev, "machine": machine,
           "cpu_model": cpu_model, "nproc": os.cpu_count(), "duration_s": args.duration, "rounds": args.rounds,
           "warm_s": args.warm, "transport": args.transport}
    if len(rates) == 1:
        doc.update({"rate": rates[0], "variants": by_rate[rates[0]]["variants"]})
    else:
        doc.update({"rates": rates, "by_rate": {str(k): v for k, v in by_rate.items()}})
    with open(args.out + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    f = lambda x, fmt="%.1f": "-" if x is None else fmt % x
    lines = ["# Proxy 200 CPU per call: variants side by side", "",
             "Generated by `bench/proxy_cpu_ab.py` %s, tandem %s, %s (%s), %d cores; %s at %s calls/s, "
             "%d s per run%s, %d interleaved rounds." % (doc["generated"], rev, machine, cpu_model, os.cpu_count(),
                                                      args.transport.upper(), ", ".join(map(str, rates)),
                                                      args.duration,
                                                      "" if args.warm is None else " (CPU read from %g s on)" % args.warm,
                                                      args.rounds), ""]
    for rate in rates:
        if len(rates) > 1:
            lines += ["## %d calls/s" % rate, ""]
        lines += ["| variant | CPU µs/call median | min | max | of which kernel (median) | p99 ms (median) |", "|---|---|---|---|---|---|"]
        for name, sm in by_rate[rate]["variants"].items():
            lines.append("| %s | %s | %s | %s | %s | %s |" % (name, f(sm["cpu_us_per_call_median"]), f(sm["cpu_us_per_call_min"]),
                                                            f(sm["cpu_us_per_call_max"]), f(sm["cpu_system_us_per_call_median"]),
                                                            f(sm["p99_ms_median"], "%.0f")))
        lines.append("")
    if args.ratio_to and len(variants) > 1:
        others = [v["name"] for v in variants if v["name"] != args.ratio_to]
        lines += ["## CPU ratio %s / variant (medians, same rate)" % args.ratio_to, "",
                  "| rate | " + " | ".join(others) + " |", "|---|" + "---|" * len(others)]
        for rate in rates:
            rt = by_rate[rate]["ratios"]
            lines.append("| %d | %s |" % (rate, " | ".join(f(rt.get(o), "%.2f") for o in others)))
        lines.append("")
    with open(args.out + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))

if __name__ == "__main__":
    main()
