#!/usr/bin/env bash
# Builds cipd's Debian package from this workspace, offline (crates from Cargo.lock; needs
# `cargo install cargo-deb` once): the binaries, their man pages and shell completions
# (rendered from the clap definitions by the hidden `generate-docs` command), then
# `cargo deb`. PROFILE=release (the default) or PROFILE=dev for a quick check build.
# The binaries are taken from, and the package written to, cargo's target directory
# (target/ unless CARGO_TARGET_DIR moves it): <target>/debian/. Prints the path of the .deb.
# PREBUILT=1 packages the binaries a build or test run already left there (the CI's check:
# `cargo test --workspace` builds them with the workspace's features unified, which a
# `cargo build -p cipd` does not match, so it would compile again for a minute).
set -euo pipefail
cd "$(dirname "$0")/../.."
. deploy/lib/target-dir.sh
profile=${PROFILE:-release}
if [ "${PREBUILT:-0}" != 1 ]; then
  cargo build --locked --profile "$profile" -p cipd --bins >&2
fi
target=$(cargo_target_dir)
bin=$(cargo_profile_dir "$profile")
for b in cipd cipctl; do
  [ -x "$bin/$b" ] || { echo "build.sh: $bin/$b was not built" >&2; exit 1; }
  # A prebuilt binary must be newer than every source of the package, or it is stale.
  if [ "${PREBUILT:-0}" = 1 ] && [ -n "$(find cipd/src cip-proto/src hints/src Cargo.lock -newer "$bin/$b" -print -quit)" ]; then
    echo "build.sh: $bin/$b is older than the sources: build it, or drop PREBUILT" >&2
    exit 1
  fi
done
rm -rf deploy/debian/generated
"$bin/cipd" generate-docs --out deploy/debian/generated
"$bin/cipctl" generate-docs --out deploy/debian/generated
# cargo-deb reads the same target directory (its assets' target/release/ prefix stands for
# it and the profile) and finds the binaries built above.
cargo deb --locked -p cipd --no-build --profile "$profile" --output "$target/debian/" >&2
ls -t "$target"/debian/cipd_*.deb | head -n 1
