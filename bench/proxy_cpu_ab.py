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


def run_one(args, v, out_dir):
    name = "ab-%s" % v["name"]
    cmd = [sys.executable, os.path.join(HERE, "find_max_rate.py"), "--binary", v.get("binary", args.binary),
           "--scenario", v["scenario"], "--transport", args.transport, "--start", str(args.rate),
           "--step", "1000", "--max-steps", "1", "--duration", str(args.duration),
           "--out-dir", out_dir, "--name", name]
    for s in v["set"]:
        cmd += ["--set", s]
    env = dict(os.environ, **v["env"])
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    with open(os.path.join(out_dir, name + ".json")) as f:
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
    p.add_argument("--duration", type=int, default=15)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--transport", default="udp", choices=["udp", "tcp"])
    p.add_argument("--variant", action="append", required=True)
    p.add_argument("--out", default=os.path.join(ROOT, "bench/results/proxy-cpu-ab"))
    args = p.parse_args()
    variants = [parse_variant(v) for v in args.variant]
    results = {v["name"]: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="tandem-ab-") as out_dir:
        for r in range(args.rounds):
            for v in variants:
                res = run_one(args, v, out_dir)
                results[v["name"]].append(res)
                print("round %d %-20s %s" % (r + 1, v["name"], res), flush=True)
                time.sleep(1)
    summary = {}
    for v in variants:
        rs = [x for x in results[v["name"]] if x and x["cpu_us_per_call"]]
        cpus = sorted(x["cpu_us_per_call"] for x in rs)
        summary[v["name"]] = {
            "variant": v, "runs": results[v["name"]],
            "cpu_us_per_call_median": statistics.median(cpus) if cpus else None,
            "cpu_us_per_call_min": cpus[0] if cpus else None,
            "cpu_us_per_call_max": cpus[-1] if cpus else None,
            "p99_ms_median": statistics.median(x["p99_ms"] for x in rs) if rs else None,
            "cpu_system_us_per_call_median": statistics.median(sys_us) if (sys_us := [x["cpu_system_us_per_call"] for x in rs
                                                                                     if x.get("cpu_system_us_per_call") is not None]) else None,
        }
    machine = subprocess.run(["uname", "-a"], capture_output=True, text=True).stdout.strip()
    rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    doc = {"generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git": rev, "machine": machine,
           "nproc": os.cpu_count(), "rate": args.rate, "duration_s": args.duration, "rounds": args.rounds,
           "transport": args.transport, "variants": summary}
    with open(args.out + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    lines = ["# Proxy 200 CPU per call: variants side by side", "",
             "Generated by `bench/proxy_cpu_ab.py` %s, tandem %s, %s, %d cores; %s at %d calls/s, "
             "%d s per run, %d interleaved rounds." % (doc["generated"], rev, machine, os.cpu_count(),
                                                      args.transport.upper(), args.rate, args.duration, args.rounds),
             "", "| variant | CPU µs/call median | min | max | of which kernel (median) | p99 ms (median) |", "|---|---|---|---|---|---|"]
    for name, s in summary.items():
        f = lambda x, fmt="%.1f": "-" if x is None else fmt % x
        lines.append("| %s | %s | %s | %s | %s | %s |" % (name, f(s["cpu_us_per_call_median"]), f(s["cpu_us_per_call_min"]),
                                                        f(s["cpu_us_per_call_max"]), f(s["cpu_system_us_per_call_median"]),
                                                        f(s["p99_ms_median"], "%.0f")))
    with open(args.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
