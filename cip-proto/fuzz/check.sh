#!/usr/bin/env bash
# Builds the fuzz targets of cip-proto, and with RUN=seconds also runs each one that long
# (through run.sh, which reports each target's executions and any crash).
# cargo-fuzz needs nightly features: on a stable toolchain RUSTC_BOOTSTRAP=1 enables them.
# Install the runner once with `cargo install cargo-fuzz`.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTC_BOOTSTRAP=1
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz is not installed: cargo install cargo-fuzz" >&2
    exit 1
fi
if [[ -n "${RUN:-}" ]]; then
    exec fuzz/run.sh "$RUN"
fi
cargo fuzz build
