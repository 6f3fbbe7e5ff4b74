# Sourced by the CLI tests (cache_cli_test.sh, seed_defaults_test.sh) after they set $work, their private
# temporary directory: the environment kept off the user's own cache and kjitd, then fail, run and expect.

unset KJIT_CACHE KJIT_ENDPOINT
export KJIT_CACHE_DIR=$work/cache-dir XDG_CACHE_HOME=$work/xdg

# fail MESSAGE...: the test fails with this message.
fail() {
  echo "FAIL: $*"
  exit 1
}

# run EXPECTED_STATUS COMMAND...: runs it, keeping stdout in $out and stderr in $err.
out= err=
run() {
  local expected=$1 status=0
  shift
  "$@" >"$work/out" 2>"$work/err" || status=$?
  out=$(cat "$work/out")
  err=$(cat "$work/err")
  printf '$ %s\n%s\n' "$*" "$out"
  [[ -z $err ]] || printf '(stderr)\n%s\n' "$err"
  [[ $status -eq $expected ]] || fail "exit status $status, expected $expected"
}

# expect TEXT PATTERN: PATTERN is an extended regular expression that must match somewhere in TEXT.
expect() {
  grep -Eq -- "$2" <<<"$1" || fail "expected output matching '$2'"
}
