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
command -v sipp >/dev/null || { echo "sipp missing (apt-get install sip-tester)"; exit 2; }
profdata=$(find "$(rustc --print sysroot)" -name llvm-profdata -type f | head -n 1)
[ -n "$profdata" ] || { echo "llvm-profdata missing (rustup component add llvm-tools)"; exit 2; }
. bench/dating/workload.sh
work=$(mktemp -d /tmp/tandem-pgo.XXXXXX)
trap 'rm -rf "$work"' EXIT

RUSTFLAGS="-Cprofile-generate=$work/raw" cargo build --release -p tandem --target-dir target/pgo-generate
for svc in dating dating_manual; do
    echo "$svc: $(dating_workload target/pgo-generate/release/tandem "$svc" 1000 50 "$work") messages profiled"
done
"$profdata" merge -o "$work/tandem.profdata" "$work/raw"
RUSTFLAGS="-Cprofile-use=$work/tandem.profdata" cargo build --release -p tandem --target-dir target/pgo
echo "built target/pgo/release/tandem"
