#!/usr/bin/env python3
"""Run Tandem's system tests.

    python3 tests/system/run_all.py --binary target/release/tandem [-k FILTER] [-v]

Each module tests/system/test_*.py provides CASES, a list of (case, function);
function(env) raises common.Failure to fail and common.Skip to skip. One line
is printed per case (PASS / FAIL / SKIP), then exactly one summary line
"N passed, M failed[, K skipped]". Exit status is 1 if anything failed.

Logs of every process go to a temporary directory (kept and named when
something fails, or always with --keep-logs); their tails are printed under
each failing case.
"""

import argparse
import importlib
import os
import shutil
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import common  # noqa: E402

# Order: quick checks first, load tests after.
ORDER = [
    "test_admin",
    "test_conformance",
    "test_bad_input_survives",
    "test_sipp_uas",
    "test_mlt_server_hangs_up",
    "test_proxy200",
    "test_state_drains",
]


def discover():
    found = sorted(f[:-3] for f in os.listdir(HERE) if f.startswith("test_") and f.endswith(".py"))
    return [m for m in ORDER if m in found] + [m for m in found if m not in ORDER]


def collect(modules):
    cases = []
    for modname in modules:
        mod = importlib.import_module(modname)
        for case, fn in mod.CASES:
            name = modname if case is None else "%s[%s]" % (modname, case)
            cases.append((name, fn))
    return cases


def indent(text, prefix="    | "):
    return "\n".join(prefix + l for l in text.splitlines())


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", default=os.path.join(common.REPO, "target", "release", "tandem"))
    ap.add_argument("-k", dest="filters", action="append", default=[],
                    help="run only cases whose name contains this (repeatable)")
    ap.add_argument("-v", "--verbose", action="store_true")
    ap.add_argument("--keep-logs", action="store_true", help="keep the log directory even on success")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--conformance-dir", default=common.default_conformance_dir())
    args = ap.parse_args(argv)

    cases = collect(discover())
    if args.filters:
        cases = [c for c in cases if any(f in c[0] for f in args.filters)]
    if args.list:
        for name, _ in cases:
            print(name)
        return 0

    binary = os.path.abspath(args.binary)
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        print("FAIL setup: tandem binary not found or not executable: %s (run `make build`)" % binary)
        print("0 passed, 1 failed")
        return 1

    workdir = tempfile.mkdtemp(prefix="tandem-system-")
    env = common.Env(binary, workdir, args.conformance_dir, args.verbose)
    print("system tests: binary=%s logs=%s" % (binary, workdir), flush=True)

    passed = failed = skipped = 0
    t_all = time.monotonic()
    for name, fn in cases:
        env.begin_test(name)
        t0 = time.monotonic()
        try:
            fn(env)
        except common.Skip as e:
            skipped += 1
            print("SKIP %s: %s" % (name, e), flush=True)
            continue
        except KeyboardInterrupt:
            print("FAIL %s: interrupted" % name, flush=True)
            failed += 1
            break
        except BaseException as e:  # noqa: BLE001 - report anything as a failure
            failed += 1
            if isinstance(e, common.Failure):
                reason = str(e)
            else:
                reason = "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())
            first, _, rest = reason.partition("\n")
            print("FAIL %s: %s" % (name, first), flush=True)
            if rest.strip():
                print(indent(rest), flush=True)
            for path in env.logs:
                if os.path.exists(path) and os.path.getsize(path) > 0:
                    print("    --- tail of %s" % path)
                    print(indent(common.tail(path)), flush=True)
            continue
        passed += 1
        print("PASS %s" % name, flush=True)
        env.log("(%s took %.1f s)" % (name, time.monotonic() - t0))

    elapsed = time.monotonic() - t_all
    if failed or args.keep_logs:
        print("logs kept in %s (%.0f s total)" % (workdir, elapsed))
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    summary = "%d passed, %d failed" % (passed, failed)
    if skipped:
        summary += ", %d skipped" % skipped
    print(summary)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
