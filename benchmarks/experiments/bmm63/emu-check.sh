#!/usr/bin/env bash
# A CPU check of a variants.py variant (on codegen 6's kernels, whose s and i are the generator's own): each case's
# kernel is generated for the CPU emulation (tests/policy/emu, matmul_gen), edited as variants.py edits an
# emitted source, and run beside the unedited kernel one std::thread per CUDA thread (matmul_run): both must
# match the promised product bit for bit, NaN, +-Inf and -0.0 included, and read only inside the views.
#
#   benchmarks/experiments/bmm63/emu-check.sh [LETTERS] [BUILD_DIR]    (LETTERS: default m; BUILD_DIR: build/)
#
# Not w, p, q or o: their named barriers (bar.sync / bar.arrive with an id) have no emulation.
set -euo pipefail
exp=$(cd "$(dirname "$0")" && pwd)
letters=${1:-m}
source "$exp/../../../tests/policy/emu/emu_lib.sh"
emu_setup matmul_run.cc matmul_gen.cc "${2:-}"
r() {
  local name=$1; shift
  local line
  line=$("$work/gen" "$work/$name.cc" "$@") || { echo "$name: $line"; failed=1; return; }
  # The variant sees the case's launch shape as an emitted source's header line and may change it (t's mbarrier,
  # w's and x's grids and blocks): the harness then runs it with that shape.
  local vline
  vline=$(python3 -c "
import importlib.util, re, sys
spec = importlib.util.spec_from_file_location('v', '$exp/variants.py'); v = importlib.util.module_from_spec(spec)
spec.loader.exec_module(v)
args, point = '$line'.split(' | ')
f = args.split()  # matmul_run's arguments: grid, block and shared bytes at 11, 12, 13
head = f'// launch: entry kjit_matmul grid {f[11]},1,1 block {f[12]},1,1 shared {f[13]} workspace 0\\n'
try:
    out = v.make(head + open('$work/$name.cc').read(), '$letters')
except AssertionError as e:
    print('variant $letters not made for this case:', e); sys.exit(1)
m = re.match(r'// launch: entry kjit_matmul grid (\\d+),1,1 block (\\d+),1,1 shared (\\d+)', out)
f[11], f[12], f[13] = m.groups()
open('$work/${name}v.cc', 'w').write(out)
print(' '.join(f) + ' | ' + point)") || { echo "$name: $vline"; return; }
  emu_run_kernel "$name" "$line"
  emu_run_kernel "${name}v" "$vline"
}
# Span 2, 8x4 a thread (the odd-batch default's shape): offsets of 4 and 12 bytes, broadcast B with two items
# ahead, f16, the copies synchronous.
r e1 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=3 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=1 hint=0 minb=1 ahead=1 span=2
r e2 bmm f32 37,63,63,63 3969,63,1 0,63,1 0 aoff=2 boff=1 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=4 hint=1 minb=1 ahead=2 span=2
r e3 bmm f16 9,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=5 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=3 hint=0 minb=1 ahead=1 span=2
KJIT_EMU_CP_ASYNC=sync r e4 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=1 boff=3 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=1 hint=0 minb=1 ahead=1 span=2
# Span 3 (the default on sm_90 since the twentieth session), and an mm over ragged 32-row tiles with 50 columns
# (the r variant's row limit and a lane's second column); variants written for one tile a matrix skip it.
r e5 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=3 boff=2 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=4 hint=0 minb=1 ahead=1 span=3
r e6 mm f32 1,100,63,50 0,63,1 0,50,1 0 aoff=1 stage=4 bm=32 bn=64 bk=8 tm=2 tn=8 vec=1 bpb=2 hint=0 minb=1 ahead=1 span=2
# Span 4 (the generator's since the twenty-second session; g, h).
r e7 bmm f32 37,63,63,63 3969,63,1 3969,63,1 0 aoff=3 boff=2 stage=4 bm=64 bn=64 bk=16 tm=8 tn=4 vec=1 bpb=4 hint=0 minb=1 ahead=1 span=4
exit $failed
