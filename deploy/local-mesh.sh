#!/usr/bin/env bash
# Starts an N-node cipd tree on loopback from the release binary, and stops it on Ctrl-C.
#
#   deploy/local-mesh.sh [N]        # default 7 nodes
#
# Node 1 is the root; node i polls nodes 2i and 2i+1 (a binary tree), and each node pushes
# datachanged up to its poller. Every node has a small collection of its own (authors
# "Author <i>", and "Garcia" on every third node), so referrals differ from node to node.
# Ports: CIP 27000+i, HTTP 27100+i (BASE_PORT overrides 27000). State lives in a temp dir
# that is removed at exit (KEEP=1 keeps it). CIPD_BIN_DIR=dir uses prebuilt binaries;
# otherwise they are built and taken from cargo's target directory (CARGO_TARGET_DIR too).
set -euo pipefail
cd "$(dirname "$0")/.."
. deploy/lib/target-dir.sh
N="${1:-7}"
BASE="${BASE_PORT:-27000}"
if ! [[ "$N" =~ ^[0-9]+$ ]] || (( N < 1 || N > 99 )); then
  echo "usage: $0 [N]   (1 <= N <= 99)" >&2
  exit 64
fi
if [[ -n "${CIPD_BIN_DIR:-}" ]]; then
  BIN="$CIPD_BIN_DIR"        # prebuilt binaries (cipd, cipctl)
else
  cargo build --release --quiet --bin cipd --bin cipctl
  BIN="$(cargo_profile_dir release)"
fi
DIR="$(mktemp -d -t cipd-mesh.XXXXXX)"
PIDS=()
stop() {
  trap - INT TERM EXIT
  echo
  echo "stopping ${#PIDS[@]} nodes"
  kill "${PIDS[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  if [[ -z "${KEEP:-}" ]]; then rm -rf "$DIR"; else echo "state kept in $DIR"; fi
}
trap stop INT TERM EXIT

dsi() { echo "1.3.6.1.4.1.99999.9$(printf '%02d' "$1")"; }
for ((i = 1; i <= N; i++)); do
  mkdir -p "$DIR/node$i"
  {
    for ((k = 0; k < 5; k++)); do
      author="Author $i"
      if (( k == 0 && i % 3 == 0 )); then author="Garcia"; fi
      title="Report $k of node $i"
      printf '@DOCUMENT { http://node%d.example/%d\nAuthor{%d}:\t%s\nTitle{%d}:\t%s\n}\n\n' \
        "$i" "$k" "${#author}" "$author" "${#title}" "$title"
    done
  } > "$DIR/node$i/docs.soif"
  {
    cat <<CONF
data_dir = "$DIR/node$i/state"
[node]
dsi = "$(dsi "$i")"
description = "local mesh node $i"
[listen]
cip = ["127.0.0.1:$((BASE + i))"]
http = ["127.0.0.1:$((BASE + 100 + i))"]
admin_socket = "$DIR/node$i/admin.sock"
[[collection]]
name = "docs"
type = "soif"
path = "$DIR/node$i/docs.soif"
CONF
    for child in $((2 * i)) $((2 * i + 1)); do
      if (( child <= N )); then
        cat <<CONF
[[peer]]
name = "node$child"
host = "127.0.0.1"
port = $((BASE + child))
role = "poll"
dsi = "$(dsi "$child")"
poll_interval = "5m"
CONF
      fi
    done
    if (( i > 1 )); then
      parent=$((i / 2))
      cat <<CONF
[[peer]]
name = "node$parent"
host = "127.0.0.1"
port = $((BASE + parent))
role = "poller"
dsi = "$(dsi "$parent")"
CONF
    fi
  } > "$DIR/node$i/cipd.toml"
  "$BIN/cipd" check-config "$DIR/node$i/cipd.toml" >/dev/null
done
# Leaves first, so every poll finds its peer up.
for ((i = N; i >= 1; i--)); do
  RUST_LOG="${RUST_LOG:-warn}" "$BIN/cipd" --config "$DIR/node$i/cipd.toml" \
    > "$DIR/node$i/log" 2>&1 &
  PIDS+=("$!")
done
# Wait for the root to be ready (its readiness endpoint), at most 60 s.
for ((t = 0; t < 600; t++)); do
  if "$BIN/cipctl" --socket "$DIR/node1/admin.sock" status >/dev/null 2>&1; then break; fi
  sleep 0.1
done
ROOT="http://127.0.0.1:$((BASE + 101))"
cat <<INFO
$N nodes up (state and logs in $DIR).
  root console:   $ROOT/
  query the root: curl '$ROOT/v1/referrals?q=Author%3DGarcia'
  chase it down:  $BIN/cipctl query --server $ROOT --follow 'Author=Garcia'
  inspect a node: $BIN/cipctl --socket $DIR/node1/admin.sock status   (or peers, table)
  node i listens on CIP 127.0.0.1:$((BASE))+i and HTTP 127.0.0.1:$((BASE + 100))+i.
Ctrl-C stops every node.
INFO
wait
