#!/usr/bin/env python3
"""Per-function cost per message from the callgrind outputs `KEEP=1 bench/dating/instructions.sh`
keeps: the slope between the 100- and 300-call runs of each function's self cost (inlined code
included), grouped by whose code it is, and the difference between `dating` and
`dating_manual` function by function. The whole-process totals of two runs of one binary differ
by about 1 % (the workload's timing moves what the runtime does); the engine's own functions
move much less, which makes this the finer reading of a change to the engine.

    bench/dating/by_function.py DIR [--event Ir|I1mr|D1mr|D1mw|Bcm|...] [--top N] [--by-file]
                                    [--contract dating|dating_compiled] [--lines FUNCTION] [--entry]

--entry prints each service's entry points' inclusive cost per message (`on_request`,
`on_response`, `on_timer`, `on_cancelled` of its `Service` implementation: the service's code and
everything it calls) and the rest of the process: the like-for-like comparison of the two
versions, which the grouping by whose code a function is cannot give (`dating_manual`'s closures
run inside the container's generic functions and are counted as shared code there).

--lines FUNCTION prints, for each service, the self cost per message (in --event's event) of
every source line in the functions whose name contains FUNCTION (its own lines and the library
lines inlined into it): where inside one function the instructions go, or which of its lines
miss the instruction cache (--event I1mr).

--by-file splits each service's own code (every group but the shared one) by the source file the
instructions come from: our crates' lines, and library code (slices, `Option`, `SmallVec`,
pointer moves and drops, atomics) the compiler inlined into them.

DIR is the folder instructions.sh names ("callgrind outputs kept in DIR"), holding
cg-SERVICE-100.out, cg-SERVICE-300.out and messages-SERVICE-{100,300}. Events other than Ir need
CACHE=1 when the outputs were made.
"""
import argparse
import os
import re
import signal
import subprocess
import sys

# Whose code a function is, by the first pattern its name matches.
GROUPS = [
    ("dating_manual", re.compile(r"tandem_services::dating_manual::")),
    # before the engine: `<tandem_services::dating::Dating as tandem_engine::...>::do_transition`
    ("dating arms", re.compile(r"tandem_services::dating::")),
    ("engine", re.compile(r"tandem_engine::")),
    ("smallvec", re.compile(r"smallvec::")),
]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = "shared (parser, transactions, container, runtime, allocator)"

LINE = re.compile(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$")


def group_of(name):
    for group, pattern in GROUPS:
        if pattern.search(name):
            return group
    return SHARED


def function_list(path, event):
    """(source file, function, self cost) for each entry of callgrind_annotate's function list
    (object names dropped). Its inclusive list is not read: see `inclusive_costs`."""
    cmd = ["callgrind_annotate", "--threshold=100", "--show=" + event, "--sort=" + event, path]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit("callgrind_annotate %s failed (an event the output lacks? Events other than Ir "
                 "need CACHE=1): %s" % (path, " ".join(done.stderr.strip().splitlines()[-1:])))
    listing = False
    for line in done.stdout.splitlines():
        if "file:function" in line:
            listing = True
            continue
        if not listing:
            continue
        if line.startswith("-- ") or "Auto-annotated source" in line:
            break
        m = LINE.match(line)
        if not m or "PROGRAM TOTALS" in line:
            continue
        name = m.group(2)
        # "FILE:FUNCTION" (a file name holds no colon)
        source, name = name.split(":", 1) if ":" in name else ("?", name)
        yield source, re.sub(r" \[[^\]]*\]$", "", name), int(m.group(1).replace(",", ""))


def self_costs(path, event):
    """{(file, function): self cost} from callgrind_annotate's function list. The file is where
    the instructions' source is: a function's entries in several files are its own code and
    what was inlined into it."""
    costs = {}
    for source, name, cost in function_list(path, event):
        key = (short_path(source), name)
        costs[key] = costs.get(key, 0) + cost
    return costs


# Each service's `Service` implementation, by the type that implements it: its entry points'
# inclusive cost is everything a message costs in the service and what the service calls.
ENTRY_TYPES = {
    "dating": "tandem_engine::engine::MachineService",
    "dating_compiled": "tandem_engine::dispatch::CompiledService",
    "dating_manual": "tandem_services::dating_manual::DatingManual",
}
ENTRY_POINTS = re.compile(r" as tandem_container::service::Service>::on_(?:request|response|timer|cancelled)$")


def inclusive_costs(path, event):
    """{function: inclusive cost} read from a callgrind output itself: a function's own cost
    lines and the inclusive costs of the calls it makes (the line after each `calls=`), summed
    over all its blocks. callgrind_annotate's inclusive list cannot be used here: it keys a
    function by the file of its inlined code too, and the entries of one function overlap (the
    services' `on_request` and the container's `Core::on_message` each came out about twice)."""
    names, incl = {}, {}
    column, fn, call = None, None, None

    def resolve(spec):
        # "(id) name" defines a compressed name, "(id)" refers to one
        m = re.match(r"\((\d+)\)(?: (.*))?$", spec.strip())
        if not m:
            return spec.strip()
        if m.group(2) is not None:
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), spec.strip())

    with open(path) as f:
        for line in f:
            if line.startswith("events:"):
                evs = line.split()[1:]
                if event not in evs:
                    sys.exit("%s has no %s events (events other than Ir need CACHE=1)" % (path, event))
                column = 1 + evs.index(event)
            elif line.startswith("fn="):
                fn, call = resolve(line[3:]), None
            elif line.startswith("cfn="):
                call = resolve(line[4:])
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                cost = int(parts[column]) if column is not None and len(parts) > column else 0
                # a recursive call's cost is already in the caller's own lines
                if fn is not None and call != fn:
                    incl[fn] = incl.get(fn, 0) + cost
                call = None
            elif line.startswith("calls="):
                pass
            elif not line.startswith(("cfi=", "cfl=", "fi=", "fe=", "fl=", "ob=", "cob=", "jump=", "jcnd=")):
                call = None
    return incl


def entry_cost(path, event, service):
    """The inclusive cost of `service`'s `Service` entry points (`on_request`, `on_response`,
    `on_timer`, `on_cancelled`): what the service's code runs and calls, the container's code
    included, wherever the compiler put it. Self costs by function cannot tell that apart: the
    closures `dating_manual` passes to the container are named after the container's functions
    (`Context::with_session`), while the dispatcher's are its own."""
    prefix = "<" + ENTRY_TYPES[service]
    total = sum(cost for name, cost in inclusive_costs(path, event).items()
                if name.startswith(prefix) and ENTRY_POINTS.search(name))
    return {"entry": total}


def print_entries(folder, services, found, event):
    print("\n%s per message: the services' entry points, inclusive (the service and what it calls), "
          "and the rest of the process (parsing, transactions, transport, runtime)\n" % event)
    print("| service | entry points | rest | all |")
    print("|---|---|---|---|")
    rows = {}
    for s in services:
        per = slope(folder, s, lambda out: entry_cost(out, event, s))
        entry, everything = per["entry"], sum(found[s].values())
        rows[s] = (entry, everything - entry, everything)
        print("| %s | %.1f | %.1f | %.1f |" % ((s,) + rows[s]))
    if len(rows) == 2:
        (a, b) = [rows[s] for s in services]
        print("| ratio | %s |" % " | ".join("%.4f" % (x / y) if y else "-" for x, y in zip(a, b)))


def short_path(path):
    """A source path without the toolchain's or the registry's prefix: `core/src/option.rs`,
    `smallvec-1.16.5/src/lib.rs`, `crates/engine/src/engine.rs`."""
    return re.sub(r".*/(?:library|registry/src/[^/]+)/", "", path)


def slopes(folder, service, event):
    """{(file, function): cost per message} for one service, or None if its outputs are
    missing."""
    return slope(folder, service, lambda out: self_costs(out, event))


def slope(folder, service, read):
    """{key: cost per message} from `read(callgrind output)` of the 100- and 300-call runs, or
    None if the service's outputs are missing."""
    runs = []
    for calls in (100, 300):
        out = os.path.join(folder, "cg-%s-%d.out" % (service, calls))
        count = os.path.join(folder, "messages-%s-%d" % (service, calls))
        if not (os.path.exists(out) and os.path.exists(count)):
            return None
        with open(count) as f:
            text = f.read().strip()
        if not text.isdigit():
            sys.exit("%s does not hold a message count (%r): the tandem's metrics were not read" % (count, text))
        runs.append((int(text), read(out)))
    (m1, a), (m2, b) = runs
    if m2 <= m1:
        sys.exit("%s: the 300-call run counted no more messages than the 100-call one (%d, %d)" % (service, m1, m2))
    return {k: (b.get(k, 0) - a.get(k, 0)) / (m2 - m1) for k in set(a) | set(b)}


def by_function(costs):
    """{function: cost}, a function's entries in several source files summed."""
    totals = {}
    for (_, name), cost in costs.items():
        totals[name] = totals.get(name, 0) + cost
    return totals


def grouped(costs):
    totals = {}
    for name, cost in costs.items():
        g = group_of(name)
        totals[g] = totals.get(g, 0) + cost
    return totals


def own_code_by_file(costs):
    """{source file: cost} of a service's own code (functions of every group but the shared)."""
    totals = {}
    for (path, name), cost in costs.items():
        if group_of(name) != SHARED:
            totals[path] = totals.get(path, 0) + cost
    return totals


def print_by_file(found, top):
    for s, costs in found.items():
        files = own_code_by_file(costs)
        ours = sum(c for p, c in files.items() if p.startswith("crates/"))
        print("\n%s's own code (%s) by source file: %.1f in all, %.1f on our crates' lines, "
              "%.1f library code inlined into them\n" % (
                  s, ", ".join(g for g, _ in GROUPS), sum(files.values()), ours, sum(files.values()) - ours))
        for path, cost in sorted(files.items(), key=lambda kv: -kv[1])[:top]:
            print("%9.1f  %s" % (cost, path))


def line_costs(path, function, event="Ir"):
    """{(file, line): self cost in `event`} of the functions whose name contains `function`,
    read from the callgrind output itself (callgrind_annotate sums a line over all functions)."""
    column = 0
    names, files = {}, {}
    fn = fl = None
    line = 0
    after_call = False
    costs = {}
    with open(path) as f:
        for raw in f:
            text = raw.rstrip("\n")
            if not text:
                continue
            if text.startswith("events:"):
                events = text.split()[1:]
                if event not in events:
                    sys.exit("%s has no %s events (CACHE=1 bench/dating/instructions.sh records them)" % (path, event))
                column = events.index(event)
                continue
            first = text[0]
            if first.isdigit() or first in "+-*":
                parts = text.split()
                pos = parts[0]
                # positions are absolute or relative to the previous line's ("+3", "-2", "*")
                if pos[0] == "+":
                    line += int(pos[1:])
                elif pos[0] == "-":
                    line -= int(pos[1:])
                elif pos != "*":
                    line = int(pos)
                # the cost line after `calls=` is the call's inclusive cost, not the caller's own
                # a cost line leaves out its trailing zero columns
                if not after_call and fn is not None and function in fn and len(parts) > 1 + column:
                    key = (fl, line)
                    costs[key] = costs.get(key, 0) + int(parts[1 + column])
                after_call = False
                continue
            if text.startswith("calls="):
                after_call = True
                continue
            m = re.match(r"^(fl|fi|fe|fn|cfn|cfl|cfi|cfe|ob|cob)=\((\d+)\)(?: (.*))?$", text)
            if not m:
                continue
            kind, ident, name = m.groups()
            table = names if kind in ("fn", "cfn") else files
            if name is not None:
                table[ident] = name
            if kind == "fn":
                fn = names.get(ident)
            elif kind in ("fl", "fi", "fe"):
                fl = files.get(ident)
    return costs


def print_lines(folder, services, function, top, event):
    for s in services:
        per = slope(folder, s, lambda out: line_costs(out, function, event))
        print("\n%s, functions matching %r: %.1f %s per message, by source line\n" % (s, function, sum(per.values()), event))
        shown = {}
        for (path, n), cost in sorted(per.items(), key=lambda kv: -kv[1])[:top]:
            text = ""
            try:
                if path not in shown:
                    with open(path) as f:
                        shown[path] = f.read().split("\n")
                text = shown[path][n - 1].strip() if n > 0 else ""
            except OSError:
                pass
            where = os.path.relpath(path, REPO) if path and path.startswith(REPO + os.sep) else short_path(path or "?")
            print("%9.1f  %s:%d  %s" % (cost, where, n, text[:90]))


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet when piped into `head`
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder")
    ap.add_argument("--event", default="Ir")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--by-file", action="store_true",
                    help="also split each service's own code by source file (ours, inlined library code)")
    ap.add_argument("--contract", default="dating",
                    help="the contract version to compare with dating_manual: dating (the engine) "
                         "or dating_compiled (the contract compiled to Rust, tandem_engine::dispatch)")
    ap.add_argument("--entry", action="store_true",
                    help="also the inclusive cost of each service's entry points (on_request, "
                         "on_response, ...) against the rest of the process")
    ap.add_argument("--lines", metavar="FUNCTION",
                    help="self cost per source line of the functions whose name contains FUNCTION")
    args = ap.parse_args()
    contract = args.contract
    by_source = {s: slopes(args.folder, s, args.event) for s in (contract, "dating_manual")}
    by_source = {s: c for s, c in by_source.items() if c is not None}
    if not by_source:
        sys.exit("no cg-SERVICE-{100,300}.out with messages-SERVICE-{100,300} in %s "
                 "(KEEP=1 bench/dating/instructions.sh makes them)" % args.folder)
    found = {s: by_function(c) for s, c in by_source.items()}
    groups = [g for g, _ in GROUPS] + [SHARED]
    names = list(found)
    print("%s per message, by whose code it is (self cost, inlined code included)\n" % args.event)
    print("| code | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    by_group = {s: grouped(c) for s, c in found.items()}
    for g in groups:
        print("| %s | %s |" % (g, " | ".join("%.1f" % by_group[s].get(g, 0) for s in names)))
    print("| all | %s |" % " | ".join("%.1f" % sum(found[s].values()) for s in names))
    for s in names:
        print("\n%s, top %d functions:\n" % (s, args.top))
        for name, cost in sorted(found[s].items(), key=lambda kv: -kv[1])[:args.top]:
            print("%9.1f  %s" % (cost, name[:140]))
    if len(found) == 2:
        d, m = found[contract], found["dating_manual"]
        diff = sorted(((d.get(k, 0) - m.get(k, 0), k) for k in set(d) | set(m)), reverse=True)
        print("\n%s − dating_manual, largest differences either way (%s, dating_manual):\n" % (contract, contract))
        shown = diff[:args.top] + diff[-(args.top // 2):] if len(diff) > args.top + args.top // 2 else diff
        for delta, name in shown:
            print("%+9.1f  %9.1f %9.1f  %s" % (delta, d.get(name, 0), m.get(name, 0), name[:120]))
    if args.by_file:
        print_by_file(by_source, args.top)
    if args.entry:
        print_entries(args.folder, names, found, args.event)
    if args.lines:
        print_lines(args.folder, names, args.lines, args.top, args.event)


if __name__ == "__main__":
    main()
