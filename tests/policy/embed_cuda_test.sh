#!/usr/bin/env bash
# kjit_embed_cuda (policy/tools/embed_cuda.cc): sections become constants holding their lines byte for byte
# (blank lines included, "//@" documentation lines and the text before the first marker left out), and a
# file it cannot embed faithfully is refused with the line that stops it.
#
#   tests/policy/embed_cuda_test.sh KJIT_EMBED_CUDA
set -uo pipefail
tool="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cat > "$work/good.cuh" <<'CUH'
// The file's own comment: not embedded.
//@section kFirst
//@ What kFirst needs: not embedded either.

__device__ int first() { return 1; }
//@section kSecond
#if X
  int y;  // a comment in the CUDA stays
#endif
CUH
"$tool" "$work/good.cuh" "$work/good.inc" || fail "a good file was refused"
# Compile the constants and print them back exactly.
cat > "$work/print.cc" <<'CC'
#include <cstdio>
#include "good.inc"
int main() { std::fputs(kFirst, stdout); std::fputs("|", stdout); std::fputs(kSecond, stdout); }
CC
c++ -std=c++17 -I"$work" "$work/print.cc" -o "$work/print" || fail "the generated constants do not compile"
expected=$'\n__device__ int first() { return 1; }\n|#if X\n  int y;  // a comment in the CUDA stays\n#endif\n'
[[ "$("$work/print"; echo .)" == "$expected." ]] || fail "sections not embedded byte for byte: $("$work/print")"

# Written only when changed: an unchanged file keeps its mtime (so its family does not rebuild).
touch -d '2000-01-01' "$work/good.inc"
"$tool" "$work/good.cuh" "$work/good.inc" || fail "second run failed"
[[ $(stat -c %Y "$work/good.inc") -lt 1000000000 ]] || fail "an unchanged output was rewritten"

# Refusals: no section, a name that is not an identifier, the raw string's delimiter in the text, usage.
printf 'int x;\n' > "$work/none.cuh"
"$tool" "$work/none.cuh" "$work/none.inc" 2> "$work/err" && fail "a file without sections was accepted"
grep -q 'nothing to embed' "$work/err" || fail "no reason for a file without sections: $(cat "$work/err")"
printf '//@section 2bad\nint x;\n' > "$work/name.cuh"
"$tool" "$work/name.cuh" "$work/name.inc" 2> "$work/err" && fail "a bad section name was accepted"
grep -q 'name.cuh:1:' "$work/err" || fail "the bad name's line is not named: $(cat "$work/err")"
printf '//@section kX\n// a line with )kjit_cuda" in it\n' > "$work/delim.cuh"
"$tool" "$work/delim.cuh" "$work/delim.inc" 2> "$work/err" && fail "the delimiter inside a section was accepted"
grep -q 'delim.cuh:2:' "$work/err" || fail "the delimiter's line is not named: $(cat "$work/err")"
"$tool" only-one-argument 2>/dev/null; [[ $? -eq 2 ]] || fail "one argument is not a usage error"
"$tool" --help > /dev/null || fail "--help failed"
echo "embed_cuda: ok"
