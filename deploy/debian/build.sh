#!/usr/bin/env bash
# Builds cipd's Debian package from this workspace, offline (crates from Cargo.lock; needs
# `cargo install cargo-deb` once): the binaries, their man pages and shell completions
# (rendered from the clap definitions by the hidden `generate-docs` command), then
# `cargo deb`. PROFILE=release (the default) or PROFILE=dev for a quick check build.
# Prints the path of the .deb.
set -euo pipefail
cd "$(dirname "$0")/../.."
profile=${PROFILE:-release}
case "$profile" in
  dev) out=debug ;;
  *) out=$profile ;;
esac
cargo build --locked --profile "$profile" -p cipd --bins >&2
rm -rf deploy/debian/generated
"target/$out/cipd" generate-docs --out deploy/debian/generated
"target/$out/cipctl" generate-docs --out deploy/debian/generated
cargo deb --locked -p cipd --no-build --profile "$profile" --output target/debian/ >&2
ls -t target/debian/cipd_*.deb | head -n 1
