#!/bin/bash
# System calls per call of the Proxy 200 scenario, Tandem against Kamailio, counted by
# `perf trace -s` over a steady window of a SIPp load (counts are exact; the tracing slows
# the servers, so this measures how many calls they make, not their time).
#
#   bench/proxy_syscalls.sh [RATE] [WINDOW_S]        (default 2000 calls/s, 5 s)
#   BIN=path/to/tandem bench/proxy_syscalls.sh ...
#   TRANSPORT=tcp bench/proxy_syscalls.sh ...        (every leg over TCP; default udp)
#
# Prints, per server, system calls per call by name (calls = RATE x WINDOW_S).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/tandem}
RATE=${1:-2000}
WINDOW=${2:-5}
command -v perf >/dev/null || { echo "perf missing (apt-get install linux-perf)"; exit 2; }
command -v sipp >/dev/null || { echo "sipp missing (apt-get install sip-tester)"; exit 2; }
work=$(mktemp -d /tmp/tandem-syscalls.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
# shellcheck source=bench/proxy_pair.sh
. bench/proxy_pair.sh

# count SERVER: runs the load against the server on $sp and traces $trace_pids
count() {
    local name=$1 sp=$2 trace_pids=$3 up=$4
    local uac
    start_uac "$sp" "$up"
    perf trace -s -p "$trace_pids" -o "$work/$name.trace" -- sleep "$WINDOW" >/dev/null 2>&1 || true
    wait $uac || true
    python3 - "$work/$name.trace" "$name" $((RATE * WINDOW)) <<'EOF'
import re, sys, collections
path, name, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
total = collections.Counter()
for line in open(path, errors="replace"):
    m = re.match(r"\s+(\w+)\s+(\d+)\s+\d+\s+[\d.]+", line)
    if m and m.group(1) not in ("syscall",):
        total[m.group(1)] += int(m.group(2))
all_calls = sum(total.values())
print("%s: %.1f system calls per call (%d calls traced)" % (name, all_calls / calls, calls))
for k, v in total.most_common(8):
    print("  %-16s %6.2f per call" % (k, v / calls))
EOF
}

measure_both count
