#!/bin/bash
# Builds target/pgo/release/tandem: the release binary optimized with a profile (PGO) of both
# dating versions, to test whether the contract version's extra cost is its code's footprint
# (decision 0004, "Fewer reads and look-ups on the fast path; code footprint"). One binary holds
# both versions, and the profile comes from the same workload run on each (instructions.sh's:
# a media tandem, SIPp's Complete, Early Bye and Complete profiles), so both get their hot code
# laid out alike. Compare with `bench/dating/instructions.sh` (BIN=...) and
# `bench/dating/run.py --binary target/pgo/release/tandem`.
#
#   bench/dating/pgo.sh        (needs sipp and llvm-profdata: rustup component add llvm-tools)
set -euo pipefail
cd "$(dirname "$0")/../.."
SCEN=bench/dating/scenarios
command -v sipp >/dev/null || { echo "sipp missing (apt-get install sip-tester)"; exit 2; }
profdata=$(find "$(rustc --print sysroot)" -name llvm-profdata -type f | head -n 1)
[ -n "$profdata" ] || { echo "llvm-profdata missing (rustup component add llvm-tools)"; exit 2; }
port() { python3 -c 'import socket;s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM);s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
work=$(mktemp -d /tmp/tandem-pgo.XXXXXX)
trap 'rm -rf "$work"' EXIT

RUSTFLAGS="-Cprofile-generate=$work/raw" cargo build --release -p tandem --target-dir target/pgo-generate
gen=target/pgo-generate/release/tandem
for svc in dating dating_manual; do
    mp=$(port); ma=$(port); dp=$(port); da=$(port); sp=$(port)
    "$gen" run --listen udp:127.0.0.1:$mp --admin 127.0.0.1:$ma --service media \
        --set media.preference_delay=300ms --set media.answer_delay=0s >"$work/media.log" 2>&1 &
    media=$!
    "$gen" run --listen udp:127.0.0.1:$dp --admin 127.0.0.1:$da --service "$svc" \
        --set dating.media=127.0.0.1:$mp --set container.executors=2 >"$work/$svc.log" 2>&1 &
    dating=$!
    for _ in $(seq 120); do curl -sf 127.0.0.1:$da/metrics >/dev/null && break; sleep 0.5; done
    for s in complete early_bye complete; do
        (cd "$work" && sipp -sf "$OLDPWD/$SCEN/$s.xml" 127.0.0.1:$dp -i 127.0.0.1 -p $sp -r 50 -m 1000 \
            -nostdin -timeout 120 >/dev/null 2>&1) || true
    done
    sleep 2
    echo "$svc: $(curl -s 127.0.0.1:$da/metrics | awk '/^tandem_messages_in_total/ {s+=$2} END {print s}') messages profiled"
    # A clean exit writes the profile.
    kill -INT $dating; wait $dating 2>/dev/null || true
    kill -INT $media; wait $media 2>/dev/null || true
done
"$profdata" merge -o "$work/tandem.profdata" "$work/raw"
RUSTFLAGS="-Cprofile-use=$work/tandem.profdata" cargo build --release -p tandem --target-dir target/pgo
echo "built target/pgo/release/tandem"
