#!/bin/bash
# Instructions per SIP message of the dating tandem, counted by callgrind: repeatable on a
# shared, noisy machine where CPU time is not (see bench/dating/README.md, "CPU cost").
#
#   bench/dating/instructions.sh [SERVICE...]     (default: dating dating_manual)
#
# Each service runs under valgrind --tool=callgrind (2 executors) behind a media tandem, and
# SIPp plays Complete, Early Bye and Complete calls at 20 calls/s, N calls each, for N = 100 and
# N = 300; the slope between the two runs (instructions / messages) removes start-up costs.
# KEEP=1 keeps the callgrind outputs (cg-SERVICE-N.out) for callgrind_annotate.
# SETS="K=V ..." passes each K=V to the measured tandem as --set (e.g. SETS=negotiator.dating=global).
# CACHE=1 adds valgrind's cache and branch simulation and prints every event's slope per message
# (Ir, data reads/writes, I1/D1/LL misses, conditional/indirect branches and mispredictions):
# what one instruction costs depends on how much code and data a message touches.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/tandem}
SCEN=bench/dating/scenarios
command -v valgrind >/dev/null || { echo "valgrind missing (apt-get install valgrind)"; exit 2; }
command -v sipp >/dev/null || { echo "sipp missing (apt-get install sip-tester)"; exit 2; }
[ -x "$BIN" ] || { echo "$BIN missing (cargo build --release -p tandem)"; exit 2; }
port() { python3 -c 'import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
work=$(mktemp -d /tmp/tandem-instructions.XXXXXX)
trap '[ -n "${KEEP:-}" ] && echo "callgrind outputs kept in $work" >&2 || rm -rf "$work"' EXIT

tool_args=()
[ -n "${CACHE:-}" ] && tool_args=(--cache-sim=yes --branch-sim=yes)
extra_sets=()
for kv in ${SETS:-}; do extra_sets+=(--set "$kv"); done

# prints "messages EVENT=COUNT ..." (Ir=instructions; CACHE=1: every simulated event)
measure() {
    local svc=$1 calls=$2 mp ma dp da sp media dating
    mp=$(port); ma=$(port); dp=$(port); da=$(port); sp=$(port)
    "$BIN" run --listen udp:127.0.0.1:$mp --admin 127.0.0.1:$ma --service media \
        --set media.preference_delay=300ms --set media.answer_delay=0s >"$work/media.log" 2>&1 &
    media=$!
    valgrind --tool=callgrind ${tool_args[@]+"${tool_args[@]}"} --callgrind-out-file="$work/cg-$svc-$calls.out" "$BIN" run --listen udp:127.0.0.1:$dp \
        --admin 127.0.0.1:$da --service "$svc" --set dating.media=127.0.0.1:$mp \
        --set container.executors=2 ${extra_sets[@]+"${extra_sets[@]}"} >"$work/dating.log" 2>&1 &
    dating=$!
    for _ in $(seq 120); do curl -sf 127.0.0.1:$da/metrics >/dev/null && break; sleep 0.5; done
    for s in complete early_bye complete; do
        (cd "$work" && sipp -sf "$OLDPWD/$SCEN/$s.xml" 127.0.0.1:$dp -i 127.0.0.1 -p $sp -r 20 -m "$calls" \
            -nostdin -timeout 120 >/dev/null 2>&1) || true
    done
    sleep 2
    local msgs
    msgs=$(curl -s 127.0.0.1:$da/metrics | awk '/^tandem_messages_in_total/ {s+=$2} END {print s}')
    kill -INT $dating; wait $dating 2>/dev/null || true
    kill $media; wait $media 2>/dev/null || true
    # The events line names the columns of the totals line (Ir alone without CACHE=1).
    echo "$msgs $(callgrind_annotate "$work/cg-$svc-$calls.out" 2>/dev/null | awk '
        /^Events shown:/ { for (i = 3; i <= NF; i++) ev[i - 2] = $i }
        /PROGRAM TOTALS/ { gsub(",", ""); n = 0; for (i = 1; i <= NF; i++) if ($i ~ /^[0-9]+$/) printf "%s=%s ", ev[++n], $i }
        ' | sed 's/ *$//')"
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
