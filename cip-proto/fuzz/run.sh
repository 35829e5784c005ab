#!/usr/bin/env bash
# Runs every cargo-fuzz target of cip-proto/fuzz, one after the other.
#
#   cip-proto/fuzz/run.sh [SECONDS] [TARGET...]
#
# SECONDS (default 60) is each target's -max_total_time; TARGETs default to all of
# `cargo fuzz list` (stream, soif, mime, hint, query, config, hinadi, rdm, tagged, whoispp).
# Works from any directory. The targets are built once, up front (later edits to the
# sources do not affect a run in progress); then each binary runs with
# -rss_limit_mb=2048 on its working corpus (cip-proto/fuzz/corpus/<target>/, not committed)
# plus the committed seeds in cip-proto/fuzz/seeds/<target>/ when that directory exists.
# A crash, leak, timeout or out-of-memory input is written to
# cip-proto/fuzz/artifacts/<target>/ (not committed: turn it into a regression test), and
# each target's full libFuzzer output goes to cip-proto/fuzz/artifacts/<target>/run.log.
#
# Prints one line per target: its executions and seconds (from libFuzzer's final
# "Done N runs in S second(s)" line) and whether it found a crash. Exits 1 when any target
# crashed, 2 on a usage or build error.
#
# cargo-fuzz needs nightly features: on a stable toolchain RUSTC_BOOTSTRAP=1 enables them.
# Install the runner once with `cargo install cargo-fuzz`. Extra libFuzzer flags can be
# passed in FUZZ_ARGS (e.g. FUZZ_ARGS="-max_len=65536"). The machine is shared: run it
# as `nice -n 19 cip-proto/fuzz/run.sh 600`.
set -euo pipefail

fuzz_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
crate_dir="$(dirname "$fuzz_dir")"
cd "$crate_dir"
export RUSTC_BOOTSTRAP=1

seconds="${1:-60}"
if ! [[ "$seconds" =~ ^[0-9]+$ ]] || [[ "$seconds" -eq 0 ]]; then
    echo "usage: $0 [SECONDS] [TARGET...]  (SECONDS a positive integer, got '$seconds')" >&2
    exit 2
fi
shift $(($# > 0 ? 1 : 0))

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
    exit 2
fi

if [[ $# -gt 0 ]]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi

echo "== building ${#targets[@]} fuzz targets"
if ! cargo fuzz build; then
    echo "build failed" >&2
    exit 2
fi
triple="$(rustc -vV | sed -n 's/^host: //p')"
bin_dir="${CARGO_TARGET_DIR:-$fuzz_dir/target}/$triple/release"
for target in "${targets[@]}"; do
    if [[ ! -x "$bin_dir/$target" ]]; then
        echo "no fuzz target binary $bin_dir/$target" >&2
        exit 2
    fi
done

crashed=()
summary=()
for target in "${targets[@]}"; do
    corpus="$fuzz_dir/corpus/$target"
    artifacts="$fuzz_dir/artifacts/$target"
    mkdir -p "$corpus" "$artifacts"
    dirs=("$corpus")
    if [[ -d "$fuzz_dir/seeds/$target" ]]; then
        dirs+=("$fuzz_dir/seeds/$target")
    fi
    log="$artifacts/run.log"
    echo "== $target: ${seconds}s (log: $log)"
    status=0
    # The binary is run directly (as `cargo fuzz run` would, minus its rebuild), so that
    # edits to the sources during a long run do not change what is being fuzzed.
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
    ASAN_OPTIONS="${ASAN_OPTIONS:-detect_odr_violation=0}" "$bin_dir/$target" \
        -max_total_time="$seconds" \
        -rss_limit_mb=2048 \
        -artifact_prefix="$artifacts/" \
        -print_final_stats=1 \
        ${FUZZ_ARGS:-} "${dirs[@]}" >"$log" 2>&1 || status=$?

    done_line="$(grep -E '^Done [0-9]+ runs in [0-9]+ second' "$log" | tail -n 1 || true)"
    if [[ "$done_line" =~ ^Done\ ([0-9]+)\ runs\ in\ ([0-9]+)\ second ]]; then
        runs="${BASH_REMATCH[1]}"
        secs="${BASH_REMATCH[2]}"
    else
        # No "Done" line: libFuzzer stopped early (a crash); take its last status line.
        runs="$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#' || true)"
        runs="${runs:-?}"
        secs="?"
    fi
    artifact="$(grep -oE 'Test unit written to [^ ]+' "$log" | tail -n 1 | sed 's/^Test unit written to //' || true)"
    if [[ $status -ne 0 || -n "$artifact" ]]; then
        result="CRASH (exit $status${artifact:+, input $artifact})"
        crashed+=("$target")
        grep -E 'panicked at|^==[0-9]+==ERROR|^SUMMARY' "$log" | head -n 3 | sed 's/^/     /' || true
    else
        result="ok"
    fi
    line="$(printf '%-8s %12s runs in %6s s  %s' "$target" "$runs" "$secs" "$result")"
    echo "$line"
    summary+=("$line")
done

echo "== summary (${seconds}s per target)"
printf '%s\n' "${summary[@]}"
if [[ ${#crashed[@]} -gt 0 ]]; then
    echo "crashed: ${crashed[*]} (artifacts under $fuzz_dir/artifacts/)" >&2
    exit 1
fi
