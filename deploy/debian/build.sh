#!/usr/bin/env bash
# Builds cipd's Debian package from this workspace, offline (crates from Cargo.lock; needs
# `cargo install cargo-deb` once): the binaries, their man pages and shell completions
# (rendered from the clap definitions by the hidden `generate-docs` command), then
# `cargo deb`. PROFILE=release (the default) or PROFILE=dev for a quick check build.
# The binaries are taken from, and the package written to, cargo's target directory
# (target/ unless CARGO_TARGET_DIR moves it): <target>/debian/. Prints the path of the .deb.
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/lib/target-dir.sh
profile=${PROFILE:-release}
cargo build --locked --profile "$profile" -p cipd --bins >&2
target=$(cargo_target_dir)
bin=$(cargo_profile_dir "$profile")
for b in cipd cipctl; do
  [ -x "$bin/$b" ] || { echo "build.sh: $bin/$b was not built" >&2; exit 1; }
done
rm -rf deploy/debian/generated
"$bin/cipd" generate-docs --out deploy/debian/generated
"$bin/cipctl" generate-docs --out deploy/debian/generated
# cargo-deb reads the same target directory (its assets' target/release/ prefix stands for
# it and the profile) and finds the binaries built above.
cargo deb --locked -p cipd --no-build --profile "$profile" --output "$target/debian/" >&2
ls -t "$target"/debian/cipd_*.deb | head -n 1
