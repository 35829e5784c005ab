#!/usr/bin/env bash
# build-cksoif.sh - build Harvest's SOIF validator `cksoif` from source.
#
# Usage: build-cksoif.sh <harvest-source-dir> <out-dir>
#
#   <harvest-source-dir>  a Harvest/Glimpse tree containing libtemplate/
#                         (tested with github.com/gvelez17/glimpse @
#                          49457116bb0796636fd1bc84f39006fb102bfafc), or the
#                         libtemplate/ directory itself.
#   <out-dir>             where objects, libs and the `cksoif` binary go.
#
# Only the code cksoif actually links is compiled:
#   libtemplate/template/cksoif.c          (main)
#   libtemplate/template/template.c        (-> libtemplate.a, SOIF parser)
#   libtemplate/util/{buffer,xmalloc,log}.c (-> libutil.a, the only util
#                                            objects template.o pulls in)
# The pre-generated headers in libtemplate/include (autoconf.h, paths.h,
# config.h) are used as shipped; no configure run is needed.
# No source modifications are required (none are applied).
#
# Environment overrides: CC (default gcc), OPT (default -O2).

set -euo pipefail

die() { echo "build-cksoif.sh: error: $*" >&2; exit 1; }

[ $# -eq 2 ] || { echo "usage: $0 <harvest-source-dir> <out-dir>" >&2; exit 2; }

SRC=$1
OUT=$2
CC=${CC:-gcc}
OPT=${OPT:--O2}

[ -d "$SRC" ] || die "source dir '$SRC' does not exist"
if [ -d "$SRC/libtemplate/template" ]; then
    LT=$SRC/libtemplate
elif [ -d "$SRC/template" ] && [ -d "$SRC/util" ] && [ -d "$SRC/include" ]; then
    LT=$SRC
else
    die "'$SRC' does not contain libtemplate/{template,util,include}"
fi
LT=$(cd "$LT" && pwd)

for f in include/util.h include/template.h include/config.h include/autoconf.h \
         include/paths.h template/cksoif.c template/template.c \
         util/buffer.c util/xmalloc.c util/log.c; do
    [ -f "$LT/$f" ] || die "missing source file $LT/$f"
done

command -v "$CC" >/dev/null 2>&1 || die "compiler '$CC' not found"
command -v ar >/dev/null 2>&1 || die "'ar' not found (install binutils)"

mkdir -p "$OUT/obj" || die "cannot create $OUT/obj"
OUT=$(cd "$OUT" && pwd)
OBJ=$OUT/obj

# 1990s K&R C: gnu89 keeps implicit declarations legal on new gcc (>=14),
# -fcommon keeps old tentative-definition semantics, -w silences the noise.
CFLAGS="$OPT -std=gnu89 -fcommon -w -I$LT/include"

run() { echo "+ $*"; "$@" || die "command failed: $*"; }

# --- libutil.a (subset needed by template.o) ---
for f in buffer xmalloc log; do
    run $CC $CFLAGS -c "$LT/util/$f.c" -o "$OBJ/$f.o"
done
rm -f "$OBJ/libutil.a"
run ar rcs "$OBJ/libutil.a" "$OBJ/buffer.o" "$OBJ/xmalloc.o" "$OBJ/log.o"

# --- libtemplate.a ---
run $CC $CFLAGS -c "$LT/template/template.c" -o "$OBJ/template.o"
rm -f "$OBJ/libtemplate.a"
run ar rcs "$OBJ/libtemplate.a" "$OBJ/template.o"

# --- cksoif (link line as in libtemplate/template/Makefile.in) ---
run $CC $CFLAGS -c "$LT/template/cksoif.c" -o "$OBJ/cksoif.o"
run $CC -o "$OUT/cksoif" "$OBJ/cksoif.o" -L"$OBJ" -ltemplate -lutil -lm

# --- smoke test ---
printf '@FILE { http://example.org/a\nTitle{5}:\tHello\n}\n' \
    | "$OUT/cksoif" | grep -q '^Successfully parsed 1 SOIF objects, in 1 attempts$' \
    || die "smoke test of $OUT/cksoif failed"

echo "built $OUT/cksoif"
