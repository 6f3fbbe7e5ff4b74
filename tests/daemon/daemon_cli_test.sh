#!/usr/bin/env bash
# `kjit daemon ...`, `kjit tasks` and `kjit submit`, tried as a new user would.
#
#   daemon_cli_test.sh CASE KJIT KJITD [SUBCOMMAND...]
#
# CASE: lifecycle, stop_unresponsive, keygen, tcp_without_keys_refused,
# run (with the path of libkjit_preload.so), run_without_kjitd,
# status_evaluators (with the path of the fake evaluator worker), or help (with
# the SUBCOMMAND words, e.g. `help ... daemon start`).
#
# Everything lives in a private temporary directory (runtime dir, cache, config);
# the user's own kjitd, cache and configuration are never touched. Any kjitd the
# test started is stopped on exit, whatever happened.
set -euo pipefail

if [[ $# -lt 3 ]]; then
  echo "usage: $0 CASE KJIT KJITD [SUBCOMMAND...]" >&2
  exit 2
fi
case_name=$1
kjit=$2
kjitd=$3
shift 3

# Short, fixed prefix: the sockets' paths must fit in sun_path (108 bytes).
tmp=$(mktemp -d /tmp/kjit-dcli.XXXXXX)
unset KJIT_ENDPOINT KJIT_CONFIG XDG_RUNTIME_DIR
for var in $(compgen -e KJITD_ || true); do unset "$var"; done
# No tuner: it would claim the tasks these cases look at (tests/daemon_process tests the tuner).
export KJITD_TUNER=off
export KJIT_RUNTIME_DIR=$tmp/run KJIT_CACHE=$tmp/cache.db XDG_CONFIG_HOME=$tmp/config
export KJIT_CACHE_DIR=$tmp/cache-dir XDG_CACHE_HOME=$tmp/xdg-cache
endpoint=ipc://$tmp/run/kjitd.sock
pid_file=$tmp/run/kjitd.pid

# alive PID: a live process (a zombie has exited; this machine's init may be slow to reap).
alive() {
  local state
  state=$(awk '{ sub(/.*\) /, ""); print $1 }' "/proc/$1/stat" 2>/dev/null) || return 1
  [[ -n $state && $state != Z ]]
}

is_kjitd() {
  [[ $(cat "/proc/$1/comm" 2>/dev/null) == kjitd ]]
}

started_pids=()
cleanup() {
  local status=$? pid f
  local pids=("${started_pids[@]}")
  for f in "$tmp"/run/*.pid; do
    [[ -f $f ]] && pids+=("$(cat "$f" 2>/dev/null || true)")
  done
  for pid in "${pids[@]}"; do
    [[ $pid =~ ^[0-9]+$ ]] || continue
    if alive "$pid" && is_kjitd "$pid"; then
      echo "cleanup: stopping kjitd (pid $pid) that the test left running"
      kill -CONT "$pid" 2>/dev/null || true
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
      if alive "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    fi
  done
  rm -rf "$tmp"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL: $*"
  exit 1
}

# run EXPECTED_STATUS COMMAND...: runs it (for at most 60 s), keeping stdout in $out and stderr in $err.
out='' err=''
run() {
  local expected=$1 status=0
  shift
  timeout -k 5 60 "$@" >"$tmp/out" 2>"$tmp/err" </dev/null || status=$?
  out=$(cat "$tmp/out")
  err=$(cat "$tmp/err")
  printf '$ %s\n%s\n' "$*" "$out"
  [[ -z $err ]] || printf '(stderr)\n%s\n' "$err"
  [[ $status -ne 124 ]] || fail "timed out after 60 s: $*"
  [[ $status -eq $expected ]] || fail "exit status $status, expected $expected: $*"
}

# expect TEXT PATTERN: PATTERN is an extended regular expression that must match somewhere in TEXT.
expect() {
  grep -Eq -- "$2" <<<"$1" || fail "expected output matching '$2'"
}

# ERE-quotes a literal string.
literal() {
  sed -e 's/[][\.*^$+?(){}|/]/\\&/g' <<<"$1"
}

json() {
  python3 -c 'import json, sys; json.load(sys.stdin)' <<<"$1" || fail "not valid JSON: $1"
}

# json_check TEXT PYTHON-EXPRESSION: the expression, over the parsed document `d`, must hold.
json_check() {
  python3 -c 'import json, sys; d = json.load(sys.stdin); sys.exit(0 if eval(sys.argv[1]) else 1)' "$2" <<<"$1" ||
    fail "JSON does not satisfy $2: $1"
}

wait_gone() {
  local pid=$1
  for _ in $(seq 100); do alive "$pid" || return 0; sleep 0.1; done
  fail "kjitd (pid $pid) still runs 10 s later"
}

# start_daemon: `kjit daemon start`, checked; sets $daemon_pid.
start_daemon() {
  run 0 "$kjit" daemon start "$@"
  expect "$out" "^kjitd started in the background \(pid [0-9]+, $(literal "$endpoint")\)$"
  daemon_pid=$(head -1 <<<"$out" | sed -E 's/.*\(pid ([0-9]+),.*/\1/')
  if [[ " $* " != *" --log-file "* ]]; then
    # Without a log_file of the user's, a detached kjitd logs into kjit's cache directory, and says where.
    expect "$out" "^its log: $(literal "$KJIT_CACHE_DIR/kjitd.log")$"
    for _ in $(seq 50); do [[ -s $KJIT_CACHE_DIR/kjitd.log ]] && break; sleep 0.1; done
    grep -q '"event":"started"' "$KJIT_CACHE_DIR/kjitd.log" || fail "kjitd wrote no start to $KJIT_CACHE_DIR/kjitd.log"
  fi
  started_pids+=("$daemon_pid")
  [[ -f $pid_file ]] || fail "no pid file $pid_file after start"
  [[ $(cat "$pid_file") == "$daemon_pid" ]] || fail "pid file says $(cat "$pid_file"), kjit said $daemon_pid"
  { alive "$daemon_pid" && is_kjitd "$daemon_pid"; } || fail "pid $daemon_pid is not a running kjitd"
}

stop_daemon() {
  run 0 "$kjit" daemon stop
  expect "$out" "^kjitd stopped \(pid $daemon_pid, $(literal "$endpoint")\)$"
  wait_gone "$daemon_pid"
  [[ ! -e $pid_file ]] || fail "the pid file $pid_file is still there after stop"
}

sample_text='aten::_softmax(f32[64,1048576], -1, False) sm_90'

case $case_name in
  lifecycle)
    run 3 "$kjit" daemon status
    expect "$out" "^kjitd is not running at $(literal "$endpoint") \(start it with \`kjit daemon start\`\)$"
    run 3 "$kjit" daemon status --json
    json_check "$out" 'd["running"] is False'
    run 2 "$kjit" daemon start -- --endpoint "ipc://$tmp/run/other.sock"
    expect "$err" "give the endpoint to kjit, before \`--\`"

    start_daemon
    first_pid=$daemon_pid
    run 0 "$kjit" daemon start
    expect "$out" "^kjitd is already running \(pid $daemon_pid, $(literal "$endpoint")\)$"

    run 0 "$kjit" daemon status
    expect "$out" "^kjitd is running \(pid $daemon_pid\)$"
    expect "$out" "endpoint +$(literal "$endpoint")$"
    expect "$out" "announce +ipc://"
    expect "$out" "uptime +[0-9]"
    expect "$out" "tasks queued +0$"
    run 0 "$kjit" daemon status --json
    json_check "$out" "d['running'] is True and d['pid'] == $daemon_pid and d['endpoint'] == '$endpoint'"

    run 0 "$kjit" submit --example
    expect "$out" "^task [0-9]+: queued \(new\) for $(literal "$sample_text")$"
    task_id=$(sed -E 's/^task ([0-9]+):.*/\1/' <<<"$out")
    run 0 "$kjit" submit --example
    expect "$out" "^task $task_id: merged into the existing open task for $(literal "$sample_text")$"
    # The same key in hex, as `kjit key example` prints it.
    run 0 "$kjit" key example
    key_hex=$(sed -n 's/^encoded //p' <<<"$out")
    [[ -n $key_hex ]] || fail "kjit key example printed no encoded key"
    run 0 "$kjit" submit "$key_hex" --priority 2 --detail "from the test"
    expect "$out" "^task $task_id: merged"
    run 1 "$kjit" submit 4b4a4b0200
    expect "$err" "^kjit: .*not an encoded OpKey"
    run 2 "$kjit" submit

    run 0 "$kjit" tasks
    [[ $(wc -l <<<"$out") -eq 2 ]] || fail "expected a header and 1 task"
    expect "$out" "^ID +STATE +PRIORITY +CALLS +MEAN\(us\) +GAIN\(us\) +TRIALS +BEST +KERNEL +KEY +OP / KEY$"
    expect "$out" "^ *$task_id +queued +2 +0 .* c97c4393cb47 +$(literal "${sample_text:0:24}")"
    run 0 "$kjit" tasks --json
    json "$out"
    json_check "$out" "len(d) == 1 and d[0]['id'] == $task_id and d[0]['state'] == 'queued' and \
d[0]['key_text'] == '$sample_text' and d[0]['priority'] == 2 and d[0]['detail'] == 'from the test'"
    run 0 "$kjit" tasks --state "done"
    expect "$out" "^no done tasks$"

    stop_daemon
    run 3 "$kjit" daemon status
    run 0 "$kjit" daemon stop
    expect "$out" "^kjitd is not running at $(literal "$endpoint")$"

    # Without kjitd, the queue is read from the cache file: it persisted.
    run 0 "$kjit" tasks
    expect "$err" "kjitd is not running; read from the cache file $(literal "$KJIT_CACHE")"
    expect "$out" "^ *$task_id +queued +2 "
    run 0 "$kjit" tasks --json
    json_check "$out" "len(d) == 1 and d[0]['id'] == $task_id and d[0]['key_text'] == '$sample_text'"
    run 1 "$kjit" submit --example
    expect "$err" "^kjit: unavailable: .*kjit daemon start"

    # A fresh kjitd serves the same queue.
    start_daemon
    [[ $daemon_pid != "$first_pid" ]] || fail "the restarted kjitd has the old pid"
    run 0 "$kjit" tasks
    [[ -z $err ]] || fail "tasks fell back to the cache file while kjitd runs"
    expect "$out" "^ *$task_id +queued +2 "
    run 0 "$kjit" daemon status
    expect "$out" "tasks queued +1$"
    # --watch prints the queue again and again until stopped (piped: views one after another).
    "$kjit" tasks --watch 0.5 >"$tmp/watch" 2>&1 &
    watch_pid=$!
    sleep 2.5
    kill "$watch_pid"
    wait "$watch_pid" 2>/dev/null || true
    out=$(cat "$tmp/watch")
    views=$(grep -c "^kjit tasks, .* (every 0.5 s; Ctrl-C stops)$" <<<"$out" || true)
    (( views >= 2 )) || fail "tasks --watch printed $views views in 2.5 s"
    # Each view lists the task (the last one may have been cut short by the kill).
    (( $(grep -cE "^ *$task_id +queued +2 " <<<"$out") >= views - 1 )) || fail "a --watch view lacks the task: $out"
    stop_daemon
    ;;

  stop_unresponsive)
    # A kjitd that cannot answer (stopped with SIGSTOP) gets SIGTERM from the pid file.
    start_daemon
    kill -STOP "$daemon_pid"
    run 1 "$kjit" daemon status --timeout-ms 300
    expect "$out" "^kjitd \(pid $daemon_pid\) is running but does not answer: kjitd at $(literal "$endpoint") .*[^)]$"
    run 1 "$kjit" daemon stop --timeout-ms 300 --timeout 1
    expect "$err" "^kjit: kjitd \(pid $daemon_pid\) does not answer: .*; sending it SIGTERM$"
    expect "$err" \
      "^kjit: kjitd \(pid $daemon_pid\) is still running 1\.0 s after SIGTERM; \`kill -9 $daemon_pid\` ends it"
    alive "$daemon_pid" || fail "kjitd exited while stopped"
    # The SIGTERM is pending; once it runs again, kjitd takes it and exits cleanly.
    kill -CONT "$daemon_pid"
    wait_gone "$daemon_pid"
    [[ ! -e $pid_file ]] || fail "the pid file is still there after SIGTERM"
    run 3 "$kjit" daemon status

    # And a kjitd that runs again in time is stopped by the fallback.
    start_daemon
    kill -STOP "$daemon_pid"
    (sleep 1; kill -CONT "$daemon_pid") &
    run 0 "$kjit" daemon stop --timeout-ms 300 --timeout 20
    expect "$out" "^kjitd stopped \(pid $daemon_pid, $(literal "$endpoint"), by SIGTERM\)$"
    wait
    [[ ! -e $pid_file ]] || fail "the pid file is still there after SIGTERM"
    ;;

  keygen)
    mkdir -p "$tmp/keys"
    run 0 "$kjit" daemon keygen --out "$tmp/keys/server"
    for f in server.key server.pub; do
      [[ -f $tmp/keys/$f ]] || fail "no $f written"
      [[ $(stat -c %s "$tmp/keys/$f") -eq 41 ]] || fail "$f is $(stat -c %s "$tmp/keys/$f") bytes, not 40 + newline"
      python3 - "$tmp/keys/$f" <<'PY' || fail "$f does not hold one 40-character Z85 key"
import string, sys
z85 = set(string.digits + string.ascii_letters + ".-:+=^!/*?&<>()[]{}@%$#")
text = open(sys.argv[1]).read()
sys.exit(0 if text.endswith("\n") and len(text) == 41 and set(text[:40]) <= z85 else 1)
PY
    done
    [[ $(stat -c %a "$tmp/keys/server.key") == 600 ]] || fail "server.key has mode $(stat -c %a "$tmp/keys/server.key")"
    [[ $(stat -c %a "$tmp/keys/server.pub") == 644 ]] || fail "server.pub has mode $(stat -c %a "$tmp/keys/server.pub")"
    expect "$out" "^  curve_secret_key_file = $(literal "$tmp/keys/server.key")$"
    expect "$out" "^  tcp_endpoint = tcp://"
    expect "$out" "^  $(literal "$(cat "$tmp/keys/server.pub")")$"
    ! grep -qF -- "$(cat "$tmp/keys/server.key")" <<<"$out" || fail "the secret key was printed"
    old_key=$(cat "$tmp/keys/server.key")

    run 1 "$kjit" daemon keygen --out "$tmp/keys/server"
    expect "$err" "^kjit: .*server\.key already exists; --force replaces it"
    [[ $(cat "$tmp/keys/server.key") == "$old_key" ]] || fail "a refused keygen changed the key"
    (umask 000 && run 0 "$kjit" daemon keygen --out "$tmp/keys/server" --force)
    [[ $(cat "$tmp/keys/server.key") != "$old_key" ]] || fail "--force did not replace the key"
    [[ $(stat -c %a "$tmp/keys/server.key") == 600 ]] ||
      fail "with umask 000 server.key has mode $(stat -c %a "$tmp/keys/server.key")"
    run 2 "$kjit" daemon keygen

    # kjitd takes the secret key for a TCP endpoint (port 0: any free port), with the clients' keys it admits.
    run 0 "$kjit" daemon keygen --out "$tmp/keys/client"
    cp "$tmp/keys/client.pub" "$tmp/keys/authorized"
    start_daemon -- --tcp-endpoint tcp://127.0.0.1:0 --curve-secret-key-file "$tmp/keys/server.key" \
      --curve-authorized-keys-file "$tmp/keys/authorized"
    stop_daemon
    ;;

  tcp_without_keys_refused)
    run 1 "$kjitd" --tcp-endpoint tcp://127.0.0.1:0
    expect "$err" "CURVE"
    run 1 "$kjit" daemon start -- --tcp-endpoint tcp://127.0.0.1:0
    expect "$err" "tcp_endpoint tcp://127\.0\.0\.1:0 is set without curve_secret_key_file.*CURVE"
    run 3 "$kjit" daemon status
    [[ ! -e $pid_file ]] || fail "a refused kjitd left a pid file"
    printf 'not a key\n' >"$tmp/bad.key"
    run 1 "$kjit" daemon start -- --tcp-endpoint tcp://127.0.0.1:0 --curve-secret-key-file "$tmp/bad.key" \
      --curve-allow-any-client true
    expect "$err" "40-character Z85 CURVE secret key"
    run 3 "$kjit" daemon status
    # A key but no list of the clients admitted: refused, saying what to do.
    run 0 "$kjit" daemon keygen --out "$tmp/server"
    run 1 "$kjit" daemon start -- --tcp-endpoint tcp://127.0.0.1:0 --curve-secret-key-file "$tmp/server.key"
    expect "$err" "without curve_authorized_keys_file.*curve_allow_any_client = true"
    run 3 "$kjit" daemon status
    ;;

  status_evaluators)
    # One line per GPU's evaluator worker (issue 10), with the fake worker on a fake
    # machine of two GPUs, the second named twice (by ordinal and by UUID).
    fake=$1
    export FAKE_EVALUATOR_GPUS=GPU-aaaa:90,GPU-bbbb:80
    start_daemon -- --evaluator "$fake" --devices 0,1,GPU-bbbb --when always
    # The retired duplicate shows its pid until its process has exited and been reaped (slower under the
    # sanitizers): wait for that too.
    for _ in $(seq 100); do
      run 0 "$kjit" daemon status
      grep -q "not used twice" <<<"$out" && [[ $(grep -c " ready " <<<"$out") == 2 ]] &&
        grep -q "^  gpu GPU-bbbb  unavailable  jobs" <<<"$out" && break
      sleep 0.1
    done
    expect "$out" "^evaluators \(3 GPUs\)$"
    expect "$out" "^  gpu 0  ready  sm_90  Fake GPU  GPU-aaaa  pid [0-9]+  jobs 0, starts 1, crashes 0$"
    expect "$out" "^  gpu 1  ready  sm_80  Fake GPU  GPU-bbbb  pid [0-9]+  jobs 0, starts 1, crashes 0$"
    expect "$out" "^  gpu GPU-bbbb  unavailable  jobs 0, starts 1, crashes 0$"
    expect "$out" "^      the same GPU \(GPU-bbbb\) as device 1; not used twice$"
    expect "$out" "^  evaluators_ready +2$"
    run 0 "$kjit" daemon status --json
    json_check "$out" '[e["uuid"] for e in d["evaluators"][:2]] == ["GPU-aaaa", "GPU-bbbb"] and d["evaluators"][2]["state"] == "unavailable"'
    stop_daemon
    # --when never: no worker runs. Where kjitd sees no GPU (here) the section is absent; where it
    # sees some, each is listed as stopped.
    start_daemon -- --when never
    run 0 "$kjit" daemon status
    if grep -q "^evaluators" <<<"$out"; then
      ! grep "^  gpu " <<<"$out" | grep -qv "  stopped  " || fail "a worker runs under --when never"
    fi
    expect "$out" "^counters$"
    stop_daemon
    ;;

  run)
    # `kjit run`: PRELOAD (the built libkjit_preload.so) is what it must find beside kjit.
    preload=${1:?run needs the path of libkjit_preload.so}
    unset CUDA_VISIBLE_DEVICES  # set, kjit run adds a line about it (checked at the end)
    run 0 "$kjit" run --no-daemon -- sh -c 'echo "$LD_PRELOAD"'
    [[ $out == "$preload" ]] || fail "LD_PRELOAD in the program is '$out', expected $preload"
    [[ ! -e $pid_file ]] || fail "--no-daemon started kjitd"
    LD_PRELOAD=/usr/lib/nothing-here.so run 0 "$kjit" run --no-daemon -- sh -c 'echo "$LD_PRELOAD"'
    expect "$out" "^$(literal "$preload"):/usr/lib/nothing-here.so$"
    # A nested `kjit run` does not preload twice.
    run 0 "$kjit" run --no-daemon -- "$kjit" run --no-daemon -- sh -c 'echo "$LD_PRELOAD"'
    [[ $out == "$preload" ]] || fail "nested kjit run: LD_PRELOAD is '$out'"
    # Each run is named (date-time-pid) for `kjit report --run`; a run already named (by the user, or an outer
    # `kjit run`) keeps its name.
    unset KJIT_RUN_ID
    run 0 "$kjit" run --no-daemon -- sh -c 'echo "$KJIT_RUN_ID"'
    expect "$out" "^[0-9]{8}-[0-9]{6}-[0-9]+$"
    KJIT_RUN_ID=mine run 0 "$kjit" run --no-daemon -- "$kjit" run --no-daemon -- sh -c 'echo "$KJIT_RUN_ID"'
    [[ $out == mine ]] || fail "KJIT_RUN_ID set before kjit run became '$out'"
    # The program's arguments, exit status and stdin/stdout are its own.
    run 7 "$kjit" run --no-daemon -- sh -c 'echo "$1 $2"; exit 7' sh -x "two words"
    [[ $out == "-x two words" ]] || fail "arguments arrived as '$out'"
    run 2 "$kjit" run --no-daemon
    expect "$err" "give the command to run after \`--\`"
    run 127 "$kjit" run --no-daemon -- "$tmp/no-such-program"
    expect "$err" "^kjit: cannot run $(literal "$tmp/no-such-program"): No such file or directory$"
    KJIT_PRELOAD_LIB=$tmp/none.so run 1 "$kjit" run --no-daemon -- true
    expect "$err" "KJIT_PRELOAD_LIB is $(literal "$tmp/none.so"), which cannot be read"
    KJIT_PRELOAD_LIB=$preload run 0 "$kjit" run --no-daemon -- sh -c 'echo "$LD_PRELOAD"'
    [[ $out == "$preload" ]] || fail "KJIT_PRELOAD_LIB not used: '$out'"
    # A copy of kjit with no preload library near it says how to build one.
    mkdir -p "$tmp/alone" && cp "$kjit" "$tmp/alone/kjit"
    run 1 "$tmp/alone/kjit" run --no-daemon -- true
    expect "$err" "cannot find libkjit_preload.so \(looked at $(literal "$tmp/lib/kjit/libkjit_preload.so")"
    expect "$err" "cmake --build build --target kjit_preload kjit_torch_adapter"

    # Without --no-daemon: kjitd is started in the background, its log in kjit's state directory...
    run 3 "$kjit" daemon status
    run 0 "$kjit" run -- sh -c 'echo program ran'
    [[ $out == "program ran" ]] || fail "the program's output is '$out'"
    expect "$err" "^kjit: kjitd started in the background \(pid [0-9]+, $(literal "$endpoint")\); its log: $(literal "$KJIT_CACHE_DIR/kjitd.log")$"
    daemon_pid=$(sed -E 's/.*\(pid ([0-9]+),.*/\1/' <<<"$err")
    started_pids+=("$daemon_pid")
    run 0 "$kjit" daemon status
    [[ -s $KJIT_CACHE_DIR/kjitd.log ]] || fail "kjitd's log $KJIT_CACHE_DIR/kjitd.log is empty or missing"
    expect "$(cat "$KJIT_CACHE_DIR/kjitd.log")" '"event":"started"'
    # ...and left running for the next program, which finds it and starts none.
    run 0 "$kjit" run -- true
    [[ -z $err ]] || fail "a second run said: $err"
    [[ $(cat "$pid_file") == "$daemon_pid" ]] || fail "a second kjitd was started"
    stop_daemon
    # KJIT_DISABLE=1: kjit is off in the program, and no kjitd is started for it.
    KJIT_DISABLE=1 run 0 "$kjit" run -- true
    [[ ! -e $pid_file ]] || fail "KJIT_DISABLE=1 started kjitd"
    # A kjitd started for a program under CUDA_VISIBLE_DEVICES sees only those GPUs: kjit run says so.
    CUDA_VISIBLE_DEVICES=1 run 0 "$kjit" run -- true
    expect "$err" "^kjit: kjitd started with CUDA_VISIBLE_DEVICES=1, so it evaluates on those GPUs only; to serve every GPU"
    daemon_pid=$(sed -nE '1s/.*\(pid ([0-9]+),.*/\1/p' <<<"$err")
    started_pids+=("$daemon_pid")
    stop_daemon
    ;;

  run_without_kjitd)
    # kjitd cannot start (its runtime directory is a file): the program runs anyway, with a warning.
    touch "$tmp/not-a-dir"
    KJIT_RUNTIME_DIR=$tmp/not-a-dir run 5 "$kjit" run -- sh -c 'echo still runs; exit 5'
    [[ $out == "still runs" ]] || fail "the program's output is '$out'"
    expect "$err" "^kjit: kjitd is not running and could not be started \(.*\); running the program without it"
    ;;

  help)
    [[ $# -gt 0 ]] || fail "help needs the subcommand's words"
    run 0 "$kjit" "$@" --help
    expect "$out" "^Usage: .*kjit $*"
    [[ $(head -n 1 <<<"$out") =~ ^[A-Z] ]] || fail "no one-line description first"
    ;;

  *)
    echo "unknown case $case_name" >&2
    exit 2
    ;;
esac
echo PASS
