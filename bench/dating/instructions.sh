#!/bin/bash
# Instructions per SIP message of the dating tandem, counted by callgrind: repeatable on a
# shared, noisy machine where CPU time is not (see bench/dating/README.md, "CPU cost").
#
#   bench/dating/instructions.sh [SERVICE...]     (default: dating dating_manual)
#
# Each service runs under valgrind --tool=callgrind (2 executors) behind a media tandem, and
# SIPp plays Complete, Early Bye and Complete calls at 20 calls/s, N calls each, for N = 100 and
# N = 300; the slope between the two runs (instructions / messages) removes start-up costs.
# KEEP=1 keeps the callgrind outputs (cg-SERVICE-N.out, with the messages each run counted in
# messages-SERVICE-N) for callgrind_annotate and bench/dating/by_function.py (cost per message
# by function and by whose code it is).
# SETS="K=V ..." passes each K=V to the measured tandem as --set (e.g. SETS=negotiator.dating=global).
# The benchmark's pinned tandems run one executor (container.executors=0 on one CPU):
# SETS=container.executors=1 counts that configuration (decision 0004, "One executor").
# CACHE=1 adds valgrind's cache and branch simulation and prints every event's slope per message
# (Ir, data reads/writes, I1/D1/LL misses, conditional/indirect branches and mispredictions):
# what one instruction costs depends on how much code and data a message touches.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/tandem}
command -v valgrind >/dev/null || { echo "valgrind missing (apt-get install valgrind)"; exit 2; }
command -v sipp >/dev/null || { echo "sipp missing (apt-get install sip-tester)"; exit 2; }
[ -x "$BIN" ] || { echo "$BIN missing (cargo build --release -p tandem)"; exit 2; }
. bench/dating/workload.sh
. bench/dating/callgrind.sh
work=$(mktemp -d /tmp/tandem-instructions.XXXXXX)
trap '[ -n "${KEEP:-}" ] && echo "callgrind outputs kept in $work" >&2 || rm -rf "$work"' EXIT

tool_args=()
[ -n "${CACHE:-}" ] && tool_args=(--cache-sim=yes --branch-sim=yes)
extra_sets=()
for kv in ${SETS:-}; do extra_sets+=(--set "$kv"); done

# prints "messages EVENT=COUNT ..." (Ir=instructions; CACHE=1: every simulated event)
measure() {
    local svc=$1 calls=$2 msgs
    local run_under=(valgrind --tool=callgrind ${tool_args[@]+"${tool_args[@]}"} --callgrind-out-file="$work/cg-$svc-$calls.out")
    msgs=$(dating_workload "$BIN" "$svc" "$calls" 20 "$work" ${extra_sets[@]+"${extra_sets[@]}"})
    echo "$msgs" >"$work/messages-$svc-$calls"
    echo "$msgs $(callgrind_totals "$work/cg-$svc-$calls.out")"
}

# "EVENT=N ..." twice -> "EVENT per message ..." (slope)
slopes() {
    python3 - "$@" <<'PY'
import sys
m1, m2 = int(sys.argv[1]), int(sys.argv[2])
a = dict(kv.split("=") for kv in sys.argv[3].split())
b = dict(kv.split("=") for kv in sys.argv[4].split())
print(", ".join("%s %.1f" % (k, (int(b[k]) - int(a[k])) / (m2 - m1)) for k in a if k in b))
PY
}

services=("$@")
[ ${#services[@]} -gt 0 ] || services=(dating dating_manual)
for svc in "${services[@]}"; do
    read -r m1 e1 < <(measure "$svc" 100)
    read -r m2 e2 < <(measure "$svc" 300)
    if [ -n "${CACHE:-}" ]; then
        echo "$svc per message ($m1 -> $m2 messages): $(slopes "$m1" "$m2" "$e1" "$e2")"
    else
        i1=${e1#Ir=} i2=${e2#Ir=}
        echo "$svc: $(( (i2 - i1) / (m2 - m1) )) instructions per message ($m1 -> $m2 messages, $i1 -> $i2 instructions)"
    fi
done
