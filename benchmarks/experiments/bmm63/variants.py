#!/usr/bin/env python3
"""Hand-edited variants of matmul's odd-bmm default (stage 4, span 2: f32 4095 x 63^3), written from the
emitted source (kjit_tune_spaces --emit-sources) by text replacement, so they follow the generator's code.

  variants.py SRC.cu OUTDIR [NAMES...]   writes OUTDIR/odd-NAME.cu for each NAME (default: v s i si vsi)

Variants (combinable, named by their letters):
  v  repack by 16-byte pieces: one shared load of 4 elements a piece (the landing buffer's pieces are
     aligned), stores to the padded layout with the row wrap found once a piece (not a division an element)
  s  the output's per-warp scratch in its own 2 KB past the landing buffers, so the store needs no block
     barrier before it (the tiles it used to overwrite may still be read by other warps' multiplies)
  i  the span copies' issue without a test a piece where the item's whole run of pieces lies inside the view
     (every item but the batch's ends): a 64-bit address, a copy and a count test a piece
"""
import os
import re
import sys

REPACK_V = r'''// Variant v: the landed span read as aligned 16-byte pieces (L: the landing buffer, span element p at
// L[o + p]), each piece's row and column found once; pieces wholly inside the span take the fast path.
template <typename T, bool KC, int R, long long RLIM>
__device__ __forceinline__ void repack4v(const raw_t* L, int o, long long r0, raw_t* D) {
  constexpr int W = KC ? (int)K_ : (int)RLIM;
  constexpr int MAXE = KC ? R * (int)K_ : (int)(K_ * RLIM);
  constexpr int MAXP = (MAXE + 2 * Q4 - 2) / Q4, PER = (MAXP + THREADS - 1) / THREADS;
  const int n = KC ? (int)(RLIM - r0 < R ? RLIM - r0 : R) * W : MAXE;
  const int np = (o + n + Q4 - 1) / Q4;
  const int t = (int)(threadIdx.x % THREADS);
  float4 v[PER];
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int q = t + i * THREADS;
    if (q < np) v[i] = *reinterpret_cast<const float4*>(L + q * Q4);
  }
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const int q = t + i * THREADS;
    if (q >= np) break;
    const int p0 = q * Q4 - o;
    const float f[4] = {v[i].x, v[i].y, v[i].z, v[i].w};
    if (p0 >= 0 && p0 + Q4 <= n) {
      const int row = (int)((unsigned)p0 / (unsigned)W), col = p0 - row * W;
      const int base = row * T::LD + col;
#pragma unroll
      for (int u = 0; u < 4; ++u) D[base + u + (col + u >= W ? T::LD - W : 0)] = f[u];
    }
  }
  // The span's first and last pieces (partly outside it, or not: the test is cheap), element by element.
#pragma unroll 1
  for (int e = 0; e < 2; ++e) {
    const int q = e == 0 ? 0 : np - 1;
    if (t != q % THREADS || (e == 1 && np == 1)) continue;
#pragma unroll 1
    for (int u = 0; u < Q4; ++u) {
      const int p = q * Q4 - o + u;
      if (p >= 0 && p < n) D[(p / W) * T::LD + p % W] = L[q * Q4 + u];
    }
  }
}
'''

STORE_S = r'''// Variant s: store_warp3 without its block barrier (the scratch is the warp's own, past the landing buffers).
__device__ __forceinline__ void store_warp3s(out_t* c, long long m0, long long n0, float* S, int ty, int tx, const float (&acc)[TM][TN]) {
  const int lane = threadIdx.x % 32, warp = (int)(threadIdx.x % THREADS) / 32;
'''


ISSUE_I = r'''    // Variant i: every piece inside the view: no test a piece.
    if (g >= lo && g + (unsigned long long)n * 16 <= hi) {
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const int q = (int)(threadIdx.x % THREADS) + i * THREADS;
        if (q >= n) break;
        kjit_cp_async<16>(S + q * Q4, reinterpret_cast<const void*>(g + (unsigned long long)q * 16));
      }
      return;
    }
'''


def make(src, letters):
    out = src
    if 'i' in letters:
        anchor = '(unsigned long long)o * sizeof(raw_t);  // 16-byte aligned\n'
        assert out.count(anchor) == 1, 'variant i: Span4::issue not found'
        i = out.index(anchor) + len(anchor)
        out = out[:i] + ISSUE_I + out[i:]
    if 'v' in letters:
        anchor = '__device__ __forceinline__ void pipelined4s('
        out = out.replace(anchor, REPACK_V + anchor, 1)
        out = out.replace('repack4<TA4, A_KCONT, BM, M_>(cur + SA4::offset(sa), m0, tiles);',
                          'repack4v<TA4, A_KCONT, BM, M_>(cur, SA4::offset(sa), m0, tiles);')
        out = out.replace('repack4<TB4, !B_NCONT, BN, N_>(cur + SA4::ELEMS + SB4::offset(sb), n0, tiles + TA4::ELEMS);',
                          'repack4v<TB4, !B_NCONT, BN, N_>(cur + SA4::ELEMS, SB4::offset(sb), n0, tiles + TA4::ELEMS);')
        assert out.count('repack4v<') == 2, 'variant v: call sites not found'
    if 's' in letters:
        # The body of store_warp3 after its barrier, reused under a new name.
        m = re.search(r'__device__ __forceinline__ void store_warp3\(.*?\n  __syncthreads\(\);[^\n]*\n(.*?\n)\}\n', out, re.S)
        assert m, 'variant s: store_warp3 not found'
        body = m.group(1).split('\n', 1)[1]  # drop the lane/warp line, restated in STORE_S
        anchor = '#if STAGE == 4\n'
        i = out.index(anchor, m.end())
        out = out[:i + len(anchor)] + STORE_S + body + '}\n' + out[i + len(anchor):]
        old = 'if (WSTORE4) store_warp3(c + bt * (M_ * N_), m0, n0, reinterpret_cast<float*>(tiles), ty, tx, acc);'
        assert old in out, 'variant s: call site not found'
        out = out.replace(old, 'if (WSTORE4) store_warp3s(c + bt * (M_ * N_), m0, n0, reinterpret_cast<float*>(land + AHEAD * SBUF4), ty, tx, acc);')
        m = re.search(r'(// launch: entry \S+ grid \S+ block \S+ shared )(\d+)', out)
        out = out[:m.start(2)] + str(int(m.group(2)) + 4 * 128 * 4) + out[m.end(2):]
    return out


def main():
    if len(sys.argv) < 3 or sys.argv[1] in ('-h', '--help'):
        print(__doc__)
        return 0 if len(sys.argv) > 1 and sys.argv[1] in ('-h', '--help') else 2
    src = open(sys.argv[1]).read()
    os.makedirs(sys.argv[2], exist_ok=True)
    for letters in sys.argv[3:] or ('v', 's', 'i', 'si', 'vsi'):
        with open(os.path.join(sys.argv[2], f'odd-{letters}.cu'), 'w') as f:
            f.write(make(src, letters))
    return 0


if __name__ == '__main__':
    sys.exit(main())
