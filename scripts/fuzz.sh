#!/usr/bin/env bash
# Fuzz tandem-sip's parser and stream framer with cargo-fuzz (libFuzzer), on a stable toolchain.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# SECONDS  run time per target (default 60); TARGET  parse_datagram and/or frame_stream (default
# both). Installs cargo-fuzz if missing, seeds fuzz/corpus/<target>/ (git-ignored) from the
# conformance corpora, runs each target with -max_total_time=SECONDS, prints libFuzzer's final
# stats, and exits non-zero if any target crashed (reproducer in fuzz/artifacts/<target>/;
# replay with `cargo fuzz run <target> <file>`, shrink with `cargo fuzz tmin <target> <file>`).
#
# Environment:
#   FUZZ_SANITIZER=none|address  default none: cargo-fuzz then passes only stable -C flags
#       (sancov instrumentation), so plain stable rustc works. `address` adds -Zsanitizer=address,
#       a nightly-only flag; the script then sets RUSTC_BOOTSTRAP=1, which lets the stable
#       compiler accept unstable flags (the same compiler nightly is built from; unsupported by
#       the Rust project, fine for a test build, never for a release). tandem-sip has no unsafe
#       code, so ASan only adds checks on dependencies (bytes, memchr) at ~2x the cost.
#   FUZZ_MAX_LEN    largest input libFuzzer generates (default 16384; the parser's limit is 65536).
#   FUZZ_JOBS       parallel fuzzing processes per target (default 1).
#   TANDEM_CONFORMANCE_DIR  seed corpus (default: ../shared/conformance beside the repository).
#   CARGO_TARGET_DIR        build directory (default fuzz/target).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
seconds=${1:-60}
[ $# -gt 0 ] && shift
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(parse_datagram frame_stream)
sanitizer=${FUZZ_SANITIZER:-none}
max_len=${FUZZ_MAX_LEN:-16384}
jobs=${FUZZ_JOBS:-1}
conformance=${TANDEM_CONFORMANCE_DIR:-$root/../shared/conformance}

if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

build_env=()
if [ "$sanitizer" != none ]; then
    build_env=(RUSTC_BOOTSTRAP=1)
fi

cd "$root/fuzz"
mkdir -p logs
status=0
summary=""
for target in "${targets[@]}"; do
    corpus="corpus/$target"
    mkdir -p "$corpus" "artifacts/$target"
    if [ -d "$conformance" ]; then
        # Flatten rfc5118/cl-fixed/x.dat to rfc5118_cl-fixed_x.dat so same-named files coexist.
        while IFS= read -r -d '' file; do
            rel=${file#"$conformance"/}
            cp "$file" "$corpus/seed_${rel//\//_}"
        done < <(find "$conformance" -name '*.dat' -print0)
    else
        echo "fuzz.sh: no conformance corpus at $conformance; starting from an empty corpus" >&2
    fi
    echo "fuzz.sh: $target for ${seconds}s (sanitizer $sanitizer, $(ls "$corpus" | wc -l) corpus files)" >&2
    log="logs/$target.log"
    set +e
    env "${build_env[@]}" cargo fuzz run --sanitizer "$sanitizer" --debug-assertions \
        --jobs "$jobs" "$target" -- \
        -max_total_time="$seconds" -max_len="$max_len" -timeout=10 -dict=sip.dict \
        -print_final_stats=1 2>&1 | tee "$log"
    code=${PIPESTATUS[0]}
    set -e
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
    execs=$(grep -E 'stat::number_of_executed_units' "$log" | tail -1 | awk '{print $2}' || true)
    if [ "$code" -ne 0 ]; then
        status=1
        crash=$(grep -E 'Test unit written to|SUMMARY' "$log" | tail -2 | tr '\n' ' ' || true)
        summary+="$target: FAILED (exit $code) $crash"$'\n'
    else
        summary+="$target: ok, ${execs:-?} executions in ${seconds}s; ${done_line:-no final line}"$'\n'
    fi
done
echo
echo "fuzz.sh summary:"
printf '%s' "$summary"
exit "$status"
