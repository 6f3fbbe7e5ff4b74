#!/usr/bin/env bash
# `cmake --install` puts kjit under a prefix, and it works from there: the programs run, `kjit run` finds the
# shim under <prefix>/lib/kjit, and kjit-policy finds the datasets under <prefix>/share/kjit.
#
#   install_test.sh BUILD_DIR
set -euo pipefail
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
for program in kjit kjitd kjit-evaluator kjit-policy; do
  [[ -x $prefix/bin/$program ]] || fail "$prefix/bin/$program was not installed"
  # From another directory, with the build tree's libraries out of reach of LD_LIBRARY_PATH.
  (cd / && env -u LD_LIBRARY_PATH "$prefix/bin/$program" --help >/dev/null) || fail "$program --help failed from the prefix"
done
[[ -f $prefix/lib/kjit/libkjit_preload.so ]] || fail "the preload library was not installed under lib/kjit"
[[ -f $prefix/lib/kjit/libkjit_torch_adapter.so ]] || fail "the PyTorch adapter was not installed under lib/kjit"
ls "$prefix"/share/kjit/datasets/*-h200.jsonl >/dev/null 2>&1 || fail "the datasets were not installed"

# kjit run preloads the installed shim (no kjitd: --no-daemon).
preload=$(cd / && "$prefix/bin/kjit" run --no-daemon -- sh -c 'echo "$LD_PRELOAD"' 2>/dev/null)
[[ $preload == "$prefix/lib/kjit/libkjit_preload.so"* ]] || fail "kjit run preloaded '$preload', not the installed shim"
# kjit-policy reads the installed datasets (its --datasets default).
datasets=$(cd / && env -u KJIT_DATASETS "$prefix/bin/kjit-policy" train --help 2>&1 | grep -e '--datasets' || true)
grep -q "$prefix/share/kjit/datasets" <<<"$datasets" || fail "kjit-policy does not default to the installed datasets: $datasets"
echo "installed under a prefix: programs, shim, adapter and datasets work from there"
