#!/usr/bin/env bash
# kjit_seed_defaults --direct (the tests' way to put expert-default kernels in a cache without kjitd),
# checked by exit status and message, against tasks queued by kjit_test_enqueue. Compiles with NVRTC; no GPU.
#
#   seed_defaults_test.sh CASE SEED_DEFAULTS ENQUEUE KJIT
#
# CASE: direct (one kernel stored per servable key, the others reported), shard (--shard I/N takes every
# N-th task), bad_shard, empty (no queued task; --limit), help.
set -euo pipefail

if [[ $# -lt 4 ]]; then
  echo "usage: $0 CASE SEED_DEFAULTS ENQUEUE KJIT" >&2
  exit 2
fi
case_name=$1
seed=$2
enqueue=$3
kjit=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source "$(dirname "$0")/cli_test_lib.sh"

softmax='aten::_softmax\(f32\[64,4096\], -1, False\) sm_90'
relu='aten::relu\(f32\[1024\]\) sm_90'
gelu='aten::gelu\(f32\[1024\]\) sm_90'

case $case_name in
  direct)
    "$enqueue" "$work/c.db" softmax relu
    run 0 "$seed" --direct --cache "$work/c.db"
    expect "$out" "^$softmax: stored unverified as record [0-9]+$"
    expect "$out" "^$relu: skipped: "
    [[ $(wc -l <<<"$out") -eq 2 ]] || fail "expected one line per task"
    # The stored kernel: the softmax key's expert default, marked as stored without verification.
    run 0 "$kjit" cache --cache "$work/c.db" show 1
    expect "$out" "expert-default"
    expect "$out" "without verification"
    expect "$out" "softmax"
    ;;

  shard)
    "$enqueue" "$work/c.db" relu softmax gelu softmax32
    # Tasks 1 and 3 of 0..3: the two softmax keys.
    run 0 "$seed" --direct --cache "$work/c.db" --shard 1/2
    expect "$out" "^$softmax: stored unverified"
    expect "$out" "^aten::_softmax\(f32\[32,4096\], -1, False\) sm_90: stored unverified"
    [[ $(wc -l <<<"$out") -eq 2 ]] || fail "expected two tasks of four"
    run 0 "$seed" --direct --cache "$work/c.db" --shard 0/2
    expect "$out" "^$relu: skipped: "
    expect "$out" "^$gelu: skipped: "
    [[ $(wc -l <<<"$out") -eq 2 ]] || fail "expected the other two tasks"
    ;;

  bad_shard)
    "$enqueue" "$work/c.db" softmax
    for shard in 2/2 1/0 x -1/3; do
      run 1 "$seed" --direct --cache "$work/c.db" --shard "$shard"
      expect "$err" "^kjit_seed_defaults: --shard takes I/N with 0 <= I < N, not '$shard'$"
    done
    ;;

  empty)
    "$enqueue" "$work/c.db" relu softmax
    run 0 "$seed" --direct --cache "$work/c.db" --limit 1
    expect "$out" "^$relu: skipped: "
    [[ $(wc -l <<<"$out") -eq 1 ]] || fail "--limit 1 took more than one task"
    run 0 "$seed" --direct --cache "$work/new.db"
    expect "$out" "^no queued tasks \(run a program under \`kjit run\` first\)$"
    ;;

  help)
    run 0 "$seed" --help
    expect "$out" "--direct"
    expect "$out" "--shard"
    ;;

  *)
    echo "unknown case $case_name" >&2
    exit 2
    ;;
esac
echo "ok: $case_name"
