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
# shellcheck source=bench/proxy_pair.sh
. bench/proxy_pair.sh

# profile NAME PORT PIDS UAC_PORT: runs the load against the server on PORT, samples PIDS
profile() {
    local name=$1 sp=$2 trace_pids=$3 up=$4
    local uac
    start_uac "$sp" "$up"
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

measure_both profile
