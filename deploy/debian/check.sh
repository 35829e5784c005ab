#!/usr/bin/env bash
# Builds the Debian package (PROFILE=dev unless set) and checks it as an operator would meet
# it: the files it installs, the conffile, the unit's enable/start scripts, and, unpacked
# into a throwaway root, a `cipd check-config` that accepts the packaged configuration and a
# daemon that starts from it (listeners moved to port 0, state to a temp dir).
set -euo pipefail
cd "$(dirname "$0")/../.."
fail() { echo "package check: $*" >&2; exit 1; }
deb=$(PROFILE=${PROFILE:-dev} deploy/debian/build.sh)
echo "package: $deb"
work=$(mktemp -d)
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
dpkg-deb --contents "$deb" > "$work/contents"
awk '{print $6}' "$work/contents" > "$work/paths"
# The documentation: README, PROTOCOL and CHANGELOG, every page of docs/ and every picture
# a page shows.
docs=(README.md PROTOCOL.md CHANGELOG.md)
for page in docs/*.md; do
  docs+=("$page")
  for pic in $(grep -oE '\]\([^)#]+\.svg\)' "$page" | sed -e 's/^](//' -e 's/)$//'); do
    docs+=("docs/$pic")
  done
done
for f in ./usr/bin/cipd ./usr/bin/cipctl ./etc/cipd/cipd.toml \
         ./usr/lib/systemd/system/cipd.service ./usr/share/man/man1/cipd.1.gz \
         ./usr/share/man/man1/cipctl.1.gz ./usr/share/bash-completion/completions/cipctl \
         ./usr/share/zsh/vendor-completions/_cipctl \
         ./usr/share/fish/vendor_completions.d/cipctl.fish \
         ./usr/share/doc/cipd/cipd.toml.example \
         $(printf './usr/share/doc/cipd/%s ' "${docs[@]}"); do
  grep -qxF "$f" "$work/paths" || fail "$f is not in the package"
done
dpkg-deb --control "$deb" "$work/control"
grep -qx /etc/cipd/cipd.toml "$work/control/conffiles" || fail "cipd.toml is not a conffile"
grep -q 'enable' "$work/control/postinst" || fail "postinst does not enable the unit"
grep -q 'start' "$work/control/postinst" || fail "postinst does not start the unit"
root="$work/root"
dpkg-deb --extract "$deb" "$root"
grep -q '^ExecStart=/usr/bin/cipd --config /etc/cipd/cipd.toml' \
  "$root/usr/lib/systemd/system/cipd.service" || fail "the unit does not run /usr/bin/cipd"
"$root/usr/bin/cipd" check-config "$root/etc/cipd/cipd.toml" >/dev/null \
  || fail "check-config refuses the packaged configuration"
sed -e "s#^data_dir = .*#data_dir = \"$work/state\"#" \
    -e 's#127.0.0.1:70[0-9]0#127.0.0.1:0#g' \
    -e "s#^admin_socket = .*#admin_socket = \"$work/admin.sock\"#" \
    "$root/etc/cipd/cipd.toml" > "$work/cipd.toml"
"$root/usr/bin/cipd" --config "$work/cipd.toml" > "$work/log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
  grep -q 'cipd ready' "$work/log" && break
  kill -0 "$pid" 2>/dev/null || fail "the daemon exited: $(cat "$work/log")"
  sleep 0.1
done
grep -q 'cipd ready' "$work/log" || fail "the daemon did not get ready: $(cat "$work/log")"
"$root/usr/bin/cipctl" --socket "$work/admin.sock" status >/dev/null || fail "cipctl status"
kill "$pid"
wait "$pid" || true
# The container recipe installs this package: what it names must be what the package has.
cf=deploy/Containerfile
grep -q 'deploy/debian/build.sh' "$cf" || fail "$cf does not build the package"
for f in $(grep -oE '/usr/bin/[a-z]+' "$cf" | sort -u); do
  [ -x "$root$f" ] || fail "$cf runs $f, which the package does not install"
done
sock=$(grep -oE '"/run/cipd/[a-z.]+"' "$cf" | tr -d '"' | head -n 1)
grep -q "^admin_socket = \"$sock\"" "$root/etc/cipd/cipd.toml" \
  || fail "$cf checks $sock, which the packaged configuration does not use"
echo "package check: ok ($(grep -c . "$work/contents") entries)"
