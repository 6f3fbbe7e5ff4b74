#!/usr/bin/env bash
# Device selection on a real GPU (issue 10), on any machine with at least one:
# kjit-evaluator and kjitd pick a GPU by ordinal and by UUID, and respect
# CUDA_VISIBLE_DEVICES (ordinals count the GPUs it leaves; a UUID names its GPU
# whatever the numbering; `devices = all` is every visible GPU).
#
#   device_selection_gpu_test.sh CASE KJIT KJITD KJIT_EVALUATOR
#
# CASE: probe (the worker alone) or kjitd (kjitd's workers, seen through
# `kjit daemon status --json`). Without a usable GPU it prints "  SKIPPED "
# and the reason (CTest then counts it as skipped).
set -euo pipefail
case_name=$1 kjit=$2 evaluator=$4  # $3, kjitd: `kjit daemon start` finds the one beside kjit

fail() {
  echo "FAIL: $*"
  exit 1
}

# probe [ENV...] -- ARGS...: kjit-evaluator --probe, its one JSON line in $out, exit status in $rc.
out='' rc=0
probe() {
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  rc=0
  out=$(env "${envs[@]}" timeout 120 "$evaluator" --probe "$@" 2>/dev/null | tail -1) || rc=$?
  echo "probe ${envs[*]} $*: rc=$rc $out"
}
field() { python3 -c 'import json, sys; m = json.loads(sys.argv[1]); print(m.get("device", {}).get(sys.argv[2], m.get(sys.argv[2], "")))' "$out" "$1"; }

unset CUDA_VISIBLE_DEVICES
probe -- --device 0
if [[ $rc -ne 0 ]]; then
  echo "  SKIPPED  no GPU kjit-evaluator can use here: $(field reason)"
  exit 0
fi
uuid=$(field uuid)
[[ $uuid == GPU-* ]] || fail "device 0 reported no UUID: $out"
count=$(python3 -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 1)
echo "device 0 is $uuid; $count GPU(s) visible"

case $case_name in
  probe)
    # By UUID: the same GPU, ordinal 0 among all.
    probe -- --device "$uuid"
    [[ $rc -eq 0 && $(field uuid) == "$uuid" ]] || fail "--device $uuid did not select it"
    # CUDA_VISIBLE_DEVICES by UUID: the only visible GPU is ordinal 0, and the UUID still names it.
    probe CUDA_VISIBLE_DEVICES="$uuid" -- --device 0
    [[ $rc -eq 0 && $(field uuid) == "$uuid" && $(field ordinal) == 0 ]] || fail "CUDA_VISIBLE_DEVICES=$uuid, --device 0"
    probe CUDA_VISIBLE_DEVICES="$uuid" -- --device "$uuid"
    [[ $rc -eq 0 && $(field uuid) == "$uuid" ]] || fail "CUDA_VISIBLE_DEVICES=$uuid, --device $uuid"
    # An ordinal past the visible GPUs, and a UUID of no GPU: refused with the reason.
    probe CUDA_VISIBLE_DEVICES="$uuid" -- --device 1
    [[ $rc -eq 3 && $out == *"does not exist"* ]] || fail "--device 1 with one GPU visible was not refused"
    probe -- --device GPU-00000000-0000-0000-0000-000000000000
    [[ $rc -eq 3 && $out == *"no visible GPU has UUID"* ]] || fail "a UUID of no GPU was not refused"
    # A GPU hidden by CUDA_VISIBLE_DEVICES (here: all of them) cannot be selected, even by UUID.
    probe CUDA_VISIBLE_DEVICES=-1 -- --device "$uuid"
    [[ $rc -eq 3 ]] || fail "a hidden GPU was selected"
    # kjit device --list: the same numbering, and NVML read by UUID answers for that GPU.
    list=$(CUDA_VISIBLE_DEVICES="$uuid" "$kjit" device --list) || fail "kjit device --list: $list"
    echo "$list"
    grep -q "^1 GPU(s) visible (CUDA_VISIBLE_DEVICES=$uuid)" <<<"$list" || fail "device --list does not show one GPU"
    grep -q "^  0  $uuid  sm_" <<<"$list" || fail "device --list does not show $uuid as ordinal 0"
    grep -Eq "^     (GPU idle|GPU busy|GPU memory in use)" <<<"$list" || fail "no NVML reading for $uuid"
    if [[ $count -ge 2 ]]; then
      probe -- --device 1
      uuid1=$(field uuid)
      probe CUDA_VISIBLE_DEVICES=1,0 -- --device 0
      [[ $(field uuid) == "$uuid1" ]] || fail "CUDA_VISIBLE_DEVICES=1,0 did not make GPU 1 ordinal 0"
    fi
    echo "PASS"
    ;;

  kjitd)
    tmp=$(mktemp -d /tmp/kjit-gsel.XXXXXX)
    export KJIT_RUNTIME_DIR=$tmp/run KJIT_CACHE=$tmp/cache.db XDG_CONFIG_HOME=$tmp/config
    unset KJIT_ENDPOINT
    stop() { "$kjit" daemon stop >/dev/null 2>&1 || true; }
    trap 'stop; rm -rf "$tmp"' EXIT
    # kjitd's workers, once they are ready: "device uuid state" lines.
    workers() {
      local status
      for _ in $(seq 240); do
        status=$("$kjit" daemon status --json 2>/dev/null || true)
        if python3 -c 'import json, sys; d = json.loads(sys.argv[1]); sys.exit(0 if d.get("evaluators") and all(e["state"] not in ("starting", "stopped") for e in d["evaluators"]) else 1)' "$status" 2>/dev/null; then
          break
        fi
        sleep 0.5
      done
      python3 -c 'import json, sys; d = json.loads(sys.argv[1]); [print(e["device"], e.get("uuid", "-"), e["state"]) for e in d.get("evaluators", [])]' "$status"
    }
    # devices = all under CUDA_VISIBLE_DEVICES=<uuid>: one worker, on that GPU.
    CUDA_VISIBLE_DEVICES="$uuid" "$kjit" daemon start -- --evaluator "$evaluator" --devices all --when always \
      --log-file "$tmp/kjitd.log" >/dev/null || fail "kjit daemon start failed"
    got=$(workers)
    echo "all, CUDA_VISIBLE_DEVICES=$uuid: $got"
    [[ $got == "0 $uuid ready" ]] || fail "expected one ready worker on $uuid; log: $(tail -5 "$tmp/kjitd.log")"
    grep -q "\"cuda_visible_devices\":\"$uuid\"" "$tmp/kjitd.log" || fail "kjitd did not log CUDA_VISIBLE_DEVICES"
    stop
    # By UUID and by ordinal: the same GPU, so one worker; the other says why.
    "$kjit" daemon start -- --evaluator "$evaluator" --devices "$uuid,0" --when always --log-file "$tmp/kjitd.log" >/dev/null || fail "kjit daemon start failed"
    got=$(workers)
    echo "devices $uuid,0: $got"
    [[ $(head -1 <<<"$got") == "$uuid $uuid ready" ]] || fail "the worker by UUID is not ready"
    [[ $(tail -1 <<<"$got") == "0 - unavailable" ]] || fail "the ordinal naming the same GPU was not stopped"
    "$kjit" daemon status | grep -q "as device $uuid; not used twice" || fail "kjit daemon status does not say why"
    stop
    # devices = all with every GPU hidden: no evaluator, and the reason names CUDA_VISIBLE_DEVICES or no device.
    # kjitd may report it on its standard error before its log file is open (seen on the H200), so both count.
    CUDA_VISIBLE_DEVICES=-1 "$kjit" daemon start -- --evaluator "$evaluator" --devices all --when always \
      --log-file "$tmp/kjitd.log" >/dev/null 2>"$tmp/start.err" || fail "kjit daemon start failed"
    said=0
    for _ in $(seq 20); do
      if cat "$tmp/kjitd.log" "$tmp/start.err" | grep -E '"evaluator_unavailable"' | grep -Eqi "no GPU|no_device|no CUDA"; then
        said=1; break
      fi
      sleep 0.5
    done
    [[ $said == 1 ]] || fail "no GPU visible, but kjitd did not say so: $(tail -3 "$tmp/kjitd.log"; cat "$tmp/start.err")"
    stop
    echo "PASS"
    ;;
  *)
    fail "unknown case $case_name"
    ;;
esac
