#!/usr/bin/env bash
# Runs `kjit cache ...` sessions against freshly made sample caches and compares
# what each command prints with tests/cli/golden/<session>.txt.
#
#   golden_test.sh [--update] KJIT MAKE_SAMPLE_CACHE
#
# --update rewrites the golden files instead of comparing (review the diff).
# A golden file holds, per command: "$ command", its stdout, its stderr after
# "(stderr)", and "[exit N]". Masked, because they vary between runs or machines:
# the temporary directory (<tmp>), the binary's path (kjit) and the database
# file's size, which depends on SQLite's page layout.
set -euo pipefail

update=0
if [[ ${1:-} == --update ]]; then
  update=1
  shift
fi
if [[ $# -ne 2 ]]; then
  echo "usage: $0 [--update] KJIT MAKE_SAMPLE_CACHE" >&2
  exit 2
fi
kjit_bin=$(realpath "$1")
make_sample=$(realpath "$2")
golden_dir=$(cd "$(dirname "$0")" && pwd)/golden
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The commands below say `kjit`; this is the binary under test.
kjit() { "$kjit_bin" "$@"; }

normalize() {
  sed -e "s|$work|<tmp>|g" -e "s|$kjit_bin|kjit|g" \
      -e 's|^file        .* (database and WAL)$|file        <size> (database and WAL)|' \
      -e 's|"file_bytes": [0-9]*|"file_bytes": "<size>"|'
}

failures=0
# session NAME COMMAND...: runs the commands in order against one new sample cache ($KJIT_CACHE).
session() {
  local name=$1
  shift
  local dir=$work/$name
  mkdir -p "$dir"
  "$make_sample" "$dir/cache.db" >/dev/null
  local actual=$dir/actual.txt
  : >"$actual"
  local command status
  for command in "$@"; do
    status=0
    (cd "$dir" && KJIT_CACHE=$dir/cache.db eval "$command") >"$dir/out" 2>"$dir/err" || status=$?
    {
      echo "\$ $command"
      cat "$dir/out"
      if [[ -s $dir/err ]]; then
        echo "(stderr)"
        cat "$dir/err"
      fi
      echo "[exit $status]"
      echo
    } >>"$actual"
  done
  normalize <"$actual" >"$actual.normalized"
  local golden=$golden_dir/$name.txt
  if [[ $update -eq 1 ]]; then
    mkdir -p "$golden_dir"
    if ! cmp -s "$actual.normalized" "$golden" 2>/dev/null; then
      cp "$actual.normalized" "$golden"
      echo "updated $golden"
    fi
  elif [[ ! -f $golden ]]; then
    echo "FAIL $name: no golden file $golden (run $0 --update ...)"
    failures=$((failures + 1))
  elif ! diff -u --label "golden/$name.txt" --label "actual" "$golden" "$actual.normalized"; then
    echo "FAIL $name: output differs from golden/$name.txt (diff above; -golden +actual)"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}

session path \
  'kjit cache path' \
  'kjit cache --json path' \
  'kjit cache --cache nowhere/cache.db path'

session ls \
  'kjit cache ls' \
  'kjit cache ls --sort speedup' \
  'kjit cache ls --sort last-use --asc' \
  'kjit cache ls --sort size --asc --limit 2' \
  'kjit cache ls --status verified --op aten::_softmax' \
  'kjit cache ls --arch 80' \
  'kjit cache ls --op aten::nothing' \
  'kjit cache ls --sort bogus'

session ls_json \
  'kjit cache ls --json --limit 2' \
  'kjit cache --json ls --status rejected'

session show \
  'kjit cache show 1' \
  'kjit cache show 64583dad' \
  'kjit cache show c97c' \
  'kjit cache show 99' \
  'kjit cache show xyz'

session show_json \
  'kjit cache show --json 3'

session stats \
  'kjit cache stats' \
  'kjit cache stats --json'

session rm \
  'kjit cache rm 3 fd9f 99' \
  'kjit cache ls' \
  'kjit cache --json rm 5'

session evict \
  'kjit cache evict --to 8K' \
  'kjit cache ls' \
  'kjit cache evict --to 1.5G --json' \
  'kjit cache evict --to 12X'

session verify \
  'kjit cache verify' \
  'kjit cache verify --arch 90 --driver 13000 --nvrtc 13.0 --codegen 1' \
  'kjit cache verify --json --arch 80 --driver 12080 --nvrtc 12.8 --codegen 1' \
  'kjit cache verify --arch 90'

session measurements \
  'kjit cache measurements' \
  'kjit cache measurements --family softmax --json' \
  'kjit cache --json measurements --limit 1' \
  'kjit cache measurements --family nothing'

session export_import \
  'kjit cache export out.db' \
  'kjit cache --cache fresh.db import out.db' \
  'kjit cache --cache fresh.db ls' \
  'kjit cache import out.db' \
  'kjit cache export out.db' \
  'kjit cache export --json softmax.db --status any --op aten::_softmax'

session missing \
  'kjit cache --cache none.db ls' \
  'KJIT_CACHE=none.db kjit cache stats' \
  'kjit cache --cache none.db stats --json' \
  'kjit cache --cache none.db rm 1'

if [[ $failures -ne 0 ]]; then
  echo "$failures session(s) differ from their golden files"
  exit 1
fi
