#!/usr/bin/env bash
# `kjit cache` behaviours checked by exit status and message.
#
#   cache_cli_test.sh CASE KJIT MAKE_SAMPLE_CACHE [SUBCOMMAND]
#
# CASE: missing_file, show_unknown, export_import, evict_to_zero, verify_healthy,
# or help (with SUBCOMMAND).
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 CASE KJIT MAKE_SAMPLE_CACHE [SUBCOMMAND]" >&2
  exit 2
fi
case_name=$1
kjit=$2
make_sample=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/cli_test_lib.sh"

sample() {
  "$make_sample" "$1" >/dev/null
}

case $case_name in
  missing_file)
    run 1 "$kjit" cache --cache "$work/none.db" ls
    expect "$err" "^kjit: no kernel cache at $work/none.db \(nothing has been cached yet; set KJIT_CACHE or --cache"
    [[ ! -e $work/none.db ]] || fail "a read created the cache file"
    # stats of a cache not created yet: an empty cache, exit 0 (as `ccache -s`)
    KJIT_CACHE=$work/env.db run 0 "$kjit" cache stats
    expect "$out" "not created yet: nothing has been cached"
    [[ ! -e $work/env.db ]] || fail "a read created the cache file"
    run 1 "$kjit" cache --cache "$work/none.db" evict --to 0
    [[ ! -e $work/none.db ]] || fail "evict created the cache file"
    ;;

  show_unknown)
    sample "$work/c.db"
    run 1 "$kjit" cache --cache "$work/c.db" show 99
    expect "$err" "^kjit: no record matches '99'$"
    run 1 "$kjit" cache --cache "$work/c.db" show ffffffff
    expect "$err" "^kjit: no record matches 'ffffffff'$"
    [[ -z $out ]] || fail "printed a record"
    ;;

  export_import)
    sample "$work/c.db"
    run 0 "$kjit" cache --cache "$work/c.db" export "$work/verified.db"
    expect "$out" "^exported 3 records to $work/verified.db$"
    run 0 "$kjit" cache --cache "$work/fresh.db" import "$work/verified.db"
    expect "$out" "^imported 3, duplicates 0, rejected 0$"
    run 0 "$kjit" cache --cache "$work/fresh.db" ls --json
    [[ $(grep -c '"key_hash"' <<<"$out") -eq 3 ]] || fail "the fresh cache does not hold 3 records"
    run 0 "$kjit" cache --cache "$work/c.db" import "$work/verified.db"
    expect "$out" "^imported 0, duplicates 3, rejected 0$"
    run 0 "$kjit" cache --cache "$work/fresh.db" import "$work/verified.db"
    expect "$out" "^imported 0, duplicates 3, rejected 0$"
    ;;

  evict_to_zero)
    sample "$work/c.db"
    run 0 "$kjit" cache --cache "$work/c.db" evict --to 0
    expect "$out" "^evicted 5 records, freed .* \(15296 bytes\); 0 B \(0 bytes\) remain$"
    run 0 "$kjit" cache --cache "$work/c.db" ls
    expect "$out" "^no records$"
    run 0 "$kjit" cache --cache "$work/c.db" stats --json
    expect "$out" '"records": 0,'
    ;;

  verify_healthy)
    sample "$work/c.db"
    run 0 "$kjit" cache --cache "$work/c.db" verify
    expect "$out" "^checked 5 records$"
    expect "$out" "^database integrity: ok$"
    expect "$out" "^quarantined now: 0$"
    run 0 "$kjit" cache --cache "$work/c.db" ls --status quarantined
    expect "$out" "^no records match$"
    ;;

  help)
    [[ $# -eq 4 ]] || fail "help needs a SUBCOMMAND"
    run 0 "$kjit" cache "$4" --help
    expect "$out" "^Usage: .*kjit cache $4 "
    ;;

  *)
    echo "unknown case '$case_name'" >&2
    exit 2
    ;;
esac
echo "ok"
