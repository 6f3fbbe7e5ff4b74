#!/usr/bin/env bash
# Compiles every op family's expert-default kernels with nvcc, ahead of run time, for each architecture given:
#
#   scripts/nvcc-kernels.sh NVCC KJIT_DUMP_KERNELS OUT_DIR ARCH...     (e.g. ... build/kernel-check 80 90 100)
#
# kjit_dump_kernels writes the sources (the text NVRTC compiles at run time, for that architecture's device
# facts); nvcc compiles each to a CUBIN with ptxas's resource report. OUT_DIR/report.md lists registers and
# spills per kernel and architecture. A kernel that does not compile fails the script (and the build that
# runs it: the kjit_nvcc_kernels target, CMake option KJIT_NVCC_KERNELS); spills are reported, not failed.
set -uo pipefail
if [[ $# -lt 4 || "$1" == -h || "$1" == --help ]]; then
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'
  [[ $# -ge 1 && ( "$1" == -h || "$1" == --help ) ]] && exit 0 || exit 2
fi
nvcc="$1"; dump="$2"; out="$3"; shift 3
jobs="${KJIT_JOBS:-$(nproc)}"
mkdir -p "$out"
report="$out/report.md"
{
  echo "# nvcc on kjit's expert-default kernels"
  echo
  echo "$("$nvcc" --version | tail -1); kernels as kjit_dump_kernels writes them; registers and spills from ptxas -v."
  echo
  echo "| arch | kernel | registers | spill stores (bytes) | spill loads (bytes) | key | point |"
  echo "|---|---|---:|---:|---:|---|---|"
} > "$report"
failed=0; total=0; spilled=0
for arch in "$@"; do
  dir="$out/sm_$arch"
  rm -rf "$dir"
  "$dump" --arch "$arch" --out "$dir" > "$out/dump-sm_$arch.log" 2>&1 || {
    echo "nvcc-kernels: kjit_dump_kernels --arch $arch failed:" >&2; cat "$out/dump-sm_$arch.log" >&2; exit 1; }
  # One nvcc a kernel, $jobs at once. NVRTC's options spelt for nvcc (--std=c++17 -> -std=c++17).
  cut -f1,3 "$dir/manifest.tsv" | xargs -P "$jobs" -L 1 bash -c '
    f="$1"; shift
    opts=(); for o in "$@"; do opts+=("${o/#--std=/-std=}"); done
    "'"$nvcc"'" -cubin -arch=sm_'"$arch"' "${opts[@]}" -Xptxas -v -o "'"$dir"'/${f%.cu}.cubin" "'"$dir"'/$f" \
      > "'"$dir"'/${f%.cu}.log" 2>&1 || echo "FAILED" >> "'"$dir"'/${f%.cu}.log"' _
  while IFS=$'\t' read -r file entry options description point; do
    log="$dir/${file%.cu}.log"
    total=$((total + 1))
    if grep -q '^FAILED$' "$log"; then
      failed=$((failed + 1))
      echo "nvcc-kernels: sm_$arch $file ($description; $point) does not compile:" >&2
      grep -v '^FAILED$' "$log" | head -20 >&2
      echo "| sm_$arch | $file | failed | | | $description | $point |" >> "$report"
      continue
    fi
    regs=$(grep -o 'Used [0-9]* registers' "$log" | head -1 | grep -o '[0-9]*')
    stores=$(grep -o '[0-9]* bytes spill stores' "$log" | head -1 | grep -o '^[0-9]*')
    loads=$(grep -o '[0-9]* bytes spill loads' "$log" | head -1 | grep -o '^[0-9]*')
    [[ "${stores:-0}" != 0 || "${loads:-0}" != 0 ]] && spilled=$((spilled + 1))
    echo "| sm_$arch | ${file%.cu} | ${regs:-?} | ${stores:-0} | ${loads:-0} | $description | $point |" >> "$report"
  done < "$dir/manifest.tsv"
done
archs=""; for arch in "$@"; do archs+="${archs:+, }sm_$arch"; done
echo "nvcc-kernels: $total kernels for $archs: $failed failed to compile, $spilled spill registers to local memory; $report"
exit $((failed > 0))
