#!/bin/bash
# User-space instructions per Proxy 200 call, counted by callgrind: repeatable on a shared,
# noisy machine where CPU time is not. Kernel time (syscalls, wake-ups) is not counted: see
# bench/proxy_cpu_ab.py for CPU time per call.
#
#   bench/proxy_instructions.sh [--annotate]     (ANNOTATE: top functions of the larger run)
#   TRANSPORT=tcp bench/proxy_instructions.sh    (both legs over TCP; default udp)
#
# tandem --service proxy runs under valgrind --tool=callgrind between a SIPp uas and a SIPp
# uac (bench/scenarios/uac_rtd.xml) at 100 calls/s, N calls, for N = 200 and N = 600; the slope
# between the two runs removes start-up costs.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-target/release/tandem}
EXTRA=${EXTRA:-}
TRANSPORT=${TRANSPORT:-udp}
case $TRANSPORT in
    udp) SIPP_T=u1; HOP_PREFIX=; SOCK=SOCK_DGRAM ;;
    tcp) SIPP_T=t1; HOP_PREFIX=tcp:; SOCK=SOCK_STREAM ;;
    *) echo "TRANSPORT must be udp or tcp"; exit 2 ;;
esac
command -v valgrind >/dev/null || { echo "valgrind missing (apt-get install valgrind)"; exit 2; }
command -v sipp >/dev/null || { echo "sipp missing (apt-get install sip-tester)"; exit 2; }
[ -x "$BIN" ] || { echo "$BIN missing (cargo build --release -p tandem)"; exit 2; }
port() { python3 -c "import socket;s=socket.socket(socket.AF_INET,socket.$SOCK);s.bind(('127.0.0.1',0));print(s.getsockname()[1])"; }
work=$(mktemp -d /tmp/tandem-proxy-instructions.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

# prints "calls instructions"
measure() {
    local calls=$1 up pp pa sp uas proxy
    up=$(port); pp=$(port); pa=$(port); sp=$(port)
    (cd "$work" && exec sipp -sn uas -t $SIPP_T -i 127.0.0.1 -p "$up" -nostdin >/dev/null 2>&1) &
    uas=$!
    # shellcheck disable=SC2086
    valgrind --tool=callgrind --callgrind-out-file="$work/cg-$calls.out" "$BIN" run --listen $TRANSPORT:127.0.0.1:$pp \
        --admin 127.0.0.1:$pa --service proxy --set proxy.next_hop=${HOP_PREFIX}127.0.0.1:$up $EXTRA >"$work/proxy.log" 2>&1 &
    proxy=$!
    for _ in $(seq 120); do curl -sf 127.0.0.1:$pa/metrics >/dev/null && break; sleep 0.5; done
    (cd "$work" && sipp -sf "$OLDPWD/bench/scenarios/uac_rtd.xml" 127.0.0.1:$pp -t $SIPP_T -i 127.0.0.1 -p "$sp" -r 100 -m "$calls" \
        -nostdin -timeout 120 >/dev/null 2>&1) || true
    sleep 1
    kill -INT $proxy; wait $proxy 2>/dev/null || true
    kill $uas; wait $uas 2>/dev/null || true
    echo "$calls $(callgrind_annotate "$work/cg-$calls.out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')"
}

read -r c1 i1 < <(measure 200)
read -r c2 i2 < <(measure 600)
echo "proxy200 over $TRANSPORT: $(( (i2 - i1) / (c2 - c1) )) instructions per call ($c1 -> $c2 calls, $i1 -> $i2 instructions)"
if [ "${1:-}" = "--annotate" ]; then
    callgrind_annotate --inclusive=no "$work/cg-600.out" 2>/dev/null | sed -n '1,60p' | cut -c1-160
fi
