#!/usr/bin/env bash
# soif-check-vs-cksoif.sh - time `cipctl soif check` against Harvest's own validator
# `cksoif` on the same real-shaped corpus, whole process, side by side.
#
# Usage: soif-check-vs-cksoif.sh <harvest-source-dir> [corpus.soif]
#
#   <harvest-source-dir>  a Harvest/Glimpse tree with libtemplate/ (for example a checkout
#                         of github.com/gvelez17/glimpse); cksoif is built from it with
#                         build-cksoif.sh into $WORK/cksoif.
#   [corpus.soif]         the SOIF file to check; by default one of about 38 MB is made
#                         from this machine's Debian package database (/var/lib/dpkg/status,
#                         or $DPKG_STATUS): every package record as an object, every field
#                         an attribute, repeated under new URLs until $CORPUS_MB is reached.
#
# Timing is farm-bench's (paired runs, median quoted) when it is on the PATH, else
# /usr/bin/time over $RUNS runs of each. cksoif reads standard input and always exits 0;
# its last line says how many objects it parsed.
#
# Environment: CIPCTL (default: cipctl in cargo's target directory, release/, built if
# missing), WORK (default a temporary directory), CORPUS_MB (38), RUNS (11), DPKG_STATUS.
set -euo pipefail

die() { echo "soif-check-vs-cksoif.sh: error: $*" >&2; exit 1; }
[ $# -ge 1 ] || { echo "usage: $0 <harvest-source-dir> [corpus.soif]" >&2; exit 2; }

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
HARVEST=$1
WORK=${WORK:-$(mktemp -d)}
RUNS=${RUNS:-11}
if [ -z "${CIPCTL:-}" ]; then
    . "$ROOT/deploy/lib/target-dir.sh"
    CIPCTL=$(cd "$ROOT" && cargo_profile_dir release)/cipctl || die "cargo cannot say where it builds"
fi

if [ ! -x "$CIPCTL" ]; then
    (cd "$ROOT" && cargo build --release -p cipd --bin cipctl) || die "cannot build cipctl"
fi
"$HERE/build-cksoif.sh" "$HARVEST" "$WORK/cksoif" >/dev/null || die "cannot build cksoif"
CKSOIF=$WORK/cksoif/cksoif

CORPUS=${2:-$WORK/corpus.soif}
if [ $# -lt 2 ]; then
    STATUS=${DPKG_STATUS:-/var/lib/dpkg/status}
    [ -r "$STATUS" ] || die "no corpus given and $STATUS cannot be read"
    command -v python3 >/dev/null || die "python3 is needed to make the corpus"
    python3 - "$STATUS" "$CORPUS" "${CORPUS_MB:-38}" <<'PY'
import sys
status, out, mb = sys.argv[1], sys.argv[2], int(sys.argv[3])
records, fields, name = [], [], None
for line in open(status, "rb").read().split(b"\n"):
    if not line.strip():
        if fields:
            records.append(fields)
        fields = []
    elif line[:1] in (b" ", b"\t") and fields:
        fields[-1][1] += b"\n" + line
    elif b":" in line:
        k, v = line.split(b":", 1)
        fields.append([k.strip(), v.strip()])
if fields:
    records.append(fields)
with open(out, "wb") as f:
    size, round_ = 0, 0
    while size < mb * 1_000_000:
        for rec in records:
            pkg = dict(rec).get(b"Package", b"unknown")
            head = b"@DEBIAN-PACKAGE { http://deb.example/pool/%s/%d\n" % (pkg, round_)
            body = b"".join(b"%s{%d}:\t%s\n" % (k, len(v), v) for k, v in rec)
            obj = head + body + b"}\n"
            f.write(obj)
            size += len(obj)
        round_ += 1
PY
fi

echo "corpus: $CORPUS ($(stat -c %s "$CORPUS") bytes, $(grep -c '^@' "$CORPUS") lines starting with @)"
echo "cksoif: $("$CKSOIF" < "$CORPUS" | tail -n 1)"
"$CIPCTL" soif check "$CORPUS" && echo "cipctl soif check: no errors"

if command -v farm-bench >/dev/null; then
    farm-bench -n "$RUNS" --vs "sh -c '$CKSOIF < $CORPUS > /dev/null'" -- "$CIPCTL" soif check "$CORPUS"
else
    for cmd in "$CIPCTL soif check $CORPUS" "$CKSOIF < $CORPUS > /dev/null"; do
        echo "== $cmd"
        for _ in $(seq "$RUNS"); do /usr/bin/time -f "%e s wall, %M KiB peak" sh -c "$cmd"; done
    done
fi
