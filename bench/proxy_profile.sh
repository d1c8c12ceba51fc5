#!/bin/bash
# Where the CPU time of the Proxy 200 scenario goes, Tandem against Kamailio under the same SIPp
# load: `perf record -e cpu-clock -g` over a steady window (this VM has no hardware counters, so
# timer sampling), then per server the share of user space and kernel, and the top symbols.
#
#   bench/proxy_profile.sh [RATE] [WINDOW_S]        (default 4000 calls/s, 10 s)
#   BIN=path/to/tandem OUT=dir bench/proxy_profile.sh ...   (OUT keeps perf.data and reports)
#
# Needs a quiet machine: sampling shows shares, and other load changes them.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/tandem}
RATE=${1:-4000}
WINDOW=${2:-10}
OUT=${OUT:-}
command -v perf >/dev/null || { echo "perf missing (apt-get install linux-perf)"; exit 2; }
command -v sipp >/dev/null || { echo "sipp missing (apt-get install sip-tester)"; exit 2; }
work=$(mktemp -d /tmp/tandem-profile.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true
    if [ -n "$OUT" ]; then mkdir -p "$OUT" && cp "$work"/*.data "$work"/*.txt "$OUT"/ 2>/dev/null || true; fi; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

# profile NAME PORT PIDS UAC_PORT: runs the load against the server on PORT, samples PIDS
profile() {
    local name=$1 sp=$2 trace_pids=$3 up=$4
    local calls=$((RATE * (WINDOW + 8)))
    (cd "$work" && exec sipp -sf "$OLDPWD/bench/scenarios/uac_rtd.xml" 127.0.0.1:"$sp" -i 127.0.0.1 -p "$up" \
        -r "$RATE" -m "$calls" -l $((RATE * 10)) -nostdin -timeout $((WINDOW + 40))s >/dev/null 2>&1) &
    local uac=$!
    sleep 4
    perf record -q -F 1999 -e cpu-clock -g -p "$trace_pids" -o "$work/$name.data" -- sleep "$WINDOW" >/dev/null 2>&1 || true
    wait $uac || true
    # (perf report's whole output is kept: `head` on its pipe would fail it under pipefail)
    perf report -q -n -i "$work/$name.data" --no-children --sort dso --stdio -g none 2>/dev/null >"$work/$name-dso.txt" || true
    perf report -q -i "$work/$name.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null >"$work/$name-symbols.txt" || true
    echo "== $name ($RATE calls/s, ${WINDOW} s): share by object"
    # samples at 1999 Hz over RATE x WINDOW calls: µs of CPU per call, by object
    python3 - "$work/$name-dso.txt" "$RATE" "$WINDOW" <<'EOF'
import re, sys
rows = [re.match(r"\s*([\d.]+)%\s+(\d+)\s+(\S+)", l) for l in open(sys.argv[1])]
rows = [(float(m.group(1)), int(m.group(2)), m.group(3)) for m in rows if m]
calls = int(sys.argv[2]) * int(sys.argv[3])
total = sum(n for _, n, _ in rows)
print("  total %.1f us per call (%d samples)" % (total / 1999 * 1e6 / calls, total))
for pct, n, dso in rows[:6]:
    print("  %6.2f%%  %6.1f us per call  %s" % (pct, n / 1999 * 1e6 / calls, dso))
EOF
    echo "-- top symbols"
    grep -v '^$' "$work/$name-symbols.txt" | sed -n '1,25p'
}

# The callee: a SIPp uas answering 200 (as in find_max_rate.py's proxy200).
uas_port=$(port)
(cd "$work" && exec sipp -sn uas -i 127.0.0.1 -p "$uas_port" -nostdin >/dev/null 2>&1) &
pids+=($!)
sleep 0.5

# Tandem, one executor (as in the suite's Proxy 200 runs).
tp=$(port); ta=$(port)
"$BIN" run --listen udp:127.0.0.1:"$tp" --admin 127.0.0.1:"$ta" --service proxy \
    --set proxy.next_hop=127.0.0.1:"$uas_port" --set container.executors=1 \
    --set container.max_transactions=1000000 >"$work/tandem.log" 2>&1 &
tpid=$!
pids+=($tpid)
for _ in $(seq 50); do curl -sf 127.0.0.1:"$ta"/health >/dev/null && break; sleep 0.2; done
profile tandem "$tp" "$tpid" "$(port)"
kill "$tpid"; wait "$tpid" 2>/dev/null || true

# Kamailio, configured as in bench/kamailio/proxy200.cfg.in (2 children).
kp=$(port)
sed -e "s/@PORT@/$kp/" -e "s/@NEXT_HOP@/127.0.0.1:$uas_port/" -e "s/@PROTO@/udp/" -e "s/@CHILDREN@/2/" \
    bench/kamailio/proxy200.cfg.in >"$work/kamailio.cfg"
kamailio -f "$work/kamailio.cfg" -DD -E -m 2048 -M 32 -x tlsf >"$work/kamailio.log" 2>&1 &
kpid=$!
pids+=($kpid)
sleep 2
kpids=$(echo "$kpid" $(pgrep -P "$kpid") | tr ' ' ,)
profile kamailio "$kp" "$kpids" "$(port)"
