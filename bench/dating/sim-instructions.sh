#!/bin/bash
# Instructions per SIP message of the dating core, counted by callgrind in the deterministic
# simulation (crates/dating-sim: both tandems in one process on a virtual clock, scripted
# callers playing the workload's Complete, Early Bye and Complete profiles). Only the dating
# core's functions are collected (parsing, transactions, container, service), so the count
# is exact for a build: two runs of one binary agree to the instruction, and a change of a
# few instructions per message shows, where the live workload (instructions.sh) moves by
# ±0.5 % with its timing.
#
#   bench/dating/sim-instructions.sh [SERVICE...]     (default: dating_compiled dating_manual)
#
# The hash tables' seeds are random per process (foldhash: keys come from the network), which
# moves a run by about ±15 instructions per message: each service is measured REPEAT times
# (default 5), and the median is printed with the range.
# CALLS (default 100 and 300 per phase: the slope removes start-up costs), CACHE=1 (cache and
# branch simulation, every event's slope), KEEP=1 (keep the callgrind outputs for
# callgrind_annotate and by_function.py, of the last repetition), BIN (default
# target/release/dating-sim), SCOPE=entry (count only inside the services' entry points,
# `on_request`, `on_response`, `on_timer`, `on_cancelled` of their `Service` implementations,
# with everything they call: the like-for-like part of the count, without the parsing,
# transactions and allocator work that both versions share around them).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/dating-sim}
command -v valgrind >/dev/null || { echo "valgrind missing (apt-get install valgrind)"; exit 2; }
[ -x "$BIN" ] || { echo "$BIN missing (cargo build --release -p tandem-dating-sim)"; exit 2; }
. bench/dating/callgrind.sh
work=$(mktemp -d /tmp/tandem-sim-instructions.XXXXXX)
trap '[ -n "${KEEP:-}" ] && echo "callgrind outputs kept in $work" >&2 || rm -rf "$work"' EXIT
tool_args=()
[ -n "${CACHE:-}" ] && tool_args=(--cache-sim=yes --branch-sim=yes)
read -r -a calls <<<"${CALLS:-100 300}"
case "${SCOPE:-core}" in
    core) scope_args=(--toggle-collect='tandem_dating_sim::dating_core_*') ;;
    # callgrind's patterns: `*` matches anything, the generic parameters included
    entry) scope_args=(--toggle-collect='<tandem_services::dating_manual::DatingManual as tandem_container::service::Service>::on_*'
                       --toggle-collect='<tandem_engine::dispatch::CompiledService<* as tandem_container::service::Service>::on_*') ;;
    *) echo "SCOPE is core or entry, not ${SCOPE}" >&2; exit 2 ;;
esac

# prints "messages EVENT=COUNT ..."
measure() {
    local svc=$1 n=$2 out msgs
    out="$work/cg-$svc-$n.out"
    valgrind --tool=callgrind ${tool_args[@]+"${tool_args[@]}"} --collect-atstart=no \
        "${scope_args[@]}" --callgrind-out-file="$out" \
        "$BIN" --service "$svc" --calls "$n" >"$work/report-$svc-$n" 2>"$work/valgrind-$svc-$n.log" ||
        { echo "$svc: the simulation failed:" >&2; cat "$work/report-$svc-$n" >&2; exit 1; }
    msgs=$(awk '$1 == "dating_messages" {print $2}' "$work/report-$svc-$n")
    echo "$msgs" >"$work/messages-$svc-$n"
    echo "$msgs $(callgrind_totals "$out")"
}

# "M1 M2 EVENTS1 EVENTS2" per repetition, one per line, on stdin -> "EVENT median (min-max), ..."
slopes() {
    python3 -c '
import statistics, sys
runs = []
for line in sys.stdin:
    m1, m2, a, b = line.rstrip("\n").split("|")
    a = dict(kv.split("=") for kv in a.split())
    b = dict(kv.split("=") for kv in b.split())
    runs.append({k: (int(b[k]) - int(a[k])) / (int(m2) - int(m1)) for k in a if k in b})
print(", ".join("%s %.1f (%.1f-%.1f)" % (k, statistics.median(r[k] for r in runs), min(r[k] for r in runs), max(r[k] for r in runs)) for k in runs[0]))
'
}

services=("$@")
[ ${#services[@]} -gt 0 ] || services=(dating_compiled dating_manual)
for svc in "${services[@]}"; do
    for _ in $(seq "${REPEAT:-5}"); do
        read -r m1 e1 <<<"$(measure "$svc" "${calls[0]}")"
        read -r m2 e2 <<<"$(measure "$svc" "${calls[1]}")"
        echo "$m1|$m2|$e1|$e2"
    done >"$work/runs-$svc"
    echo "$svc per message ($m1 -> $m2 messages, median of ${REPEAT:-5}): $(slopes <"$work/runs-$svc")"
done
