#!/usr/bin/env bash
# `kjit policy eval` on a fresh checkout: no checkpoint in the cache, so it trains the default policy first
# (a few iterations here), stores it, and evaluates it; the next command uses the stored checkpoint.
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
# The checkpoint it stored serves the next command (propose loads the newest one, and fails without).
out=$("$policy" propose --limit 1 2>&1) || { echo "$out"; fail "propose found no stored policy ($?)"; }
grep -q "^policy rl" <<<"$out" || { echo "$out"; fail "propose did not name the stored policy"; }
echo "ok"
