# Where cargo puts this workspace's build output, for the scripts in deploy/ to find the
# binaries they run: target/ by default, or wherever CARGO_TARGET_DIR (or a cargo
# configuration's build.target-dir) moves it. Source this file, then:
#
#   dir=$(cargo_target_dir)            # e.g. /home/me/cipd/target
#   bin=$(cargo_profile_dir release)   # e.g. /home/me/cipd/target/release
#
# Both ask cargo itself (`cargo metadata`), from the current directory, which must be in the
# workspace; they print nothing and fail when cargo cannot answer.

# The target directory, as an absolute path.
cargo_target_dir() {
  local json dir
  json=$(cargo metadata --format-version 1 --no-deps) || return 1
  dir=$(printf '%s\n' "$json" | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
  if [ -z "$dir" ]; then
    echo "cargo metadata reported no target_directory" >&2
    return 1
  fi
  printf '%s\n' "$dir"
}

# The directory a cargo profile's binaries go to: `dev` and `test` build into debug/,
# `release` and `bench` into release/, a custom profile into a directory of its own name.
cargo_profile_dir() {
  local dir profile=${1:-release}
  dir=$(cargo_target_dir) || return 1
  case "$profile" in
    dev | test) printf '%s/debug\n' "$dir" ;;
    release | bench) printf '%s/release\n' "$dir" ;;
    *) printf '%s/%s\n' "$dir" "$profile" ;;
  esac
}
