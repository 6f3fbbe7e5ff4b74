#!/usr/bin/env bash
# `kjit policy eval` on a fresh checkout: no checkpoint in the cache, so it trains the default policy first
# (a few iterations here), stores it, and evaluates it; a second eval uses the stored checkpoint.
#   eval_fresh_test.sh KJIT_POLICY
set -uo pipefail
policy=$1
work=$(mktemp -d /tmp/kjit-eval-fresh.XXXXXX)
trap 'rm -rf "$work"' EXIT
export KJIT_CACHE=$work/cache.db
fail() { echo "FAIL: $*"; exit 1; }

out=$("$policy" eval --train-iterations 3 --seeds 1 --k 1,4 2>&1) || { echo "$out"; fail "eval exited $?"; }
grep -q "no policy checkpoint in $KJIT_CACHE: training the default one first" <<<"$out" || { echo "$out"; fail "no training notice"; }
grep -qi "policy" <<<"$(grep '^|' <<<"$out")" || { echo "$out"; fail "no policy row in the table"; }
out=$("$policy" eval --seeds 1 --k 1 2>&1) || { echo "$out"; fail "second eval exited $?"; }
grep -q "training the default one first" <<<"$out" && { echo "$out"; fail "the second eval trained again"; }
echo "ok"
