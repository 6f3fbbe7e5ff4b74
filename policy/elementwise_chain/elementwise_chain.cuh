// The CUDA of the elementwise_chain family, in sections that elementwise_chain.cc embeds (kjit_embed_cuda, at
// build time) and writes after policy/src/cuda/common.cuh's kElementAccess and policy/src/cuda/chain.cuh's
// kChainAccess (common.cuh's own load_vec and store_vec are not used, with in_t and out_t __half so that they
// stay well-formed at VEC 8), with VEC, ITEMS, HINT, THREADS and N defined ahead of them. The chain itself (the
// kernel's parameters, loads, the per-element body and stores) is generated per key between kHead and kTail.
// Each section is embedded byte for byte (a blank line after a marker is part of it); lines starting "//@"
// document it and are not embedded.
//@section kHead
//@ The kernel's start: a block per THREADS x VEC x ITEMS consecutive elements, a thread's ITEMS vectors
//@ THREADS x VEC apart (every load and store coalesced); the generated parameter list is CHAIN_PARAMS.

extern "C" __global__ void __launch_bounds__(THREADS) kjit_elementwise_chain(CHAIN_PARAMS) {
  const long long tile = (long long)blockIdx.x * THREADS * VEC * ITEMS + (long long)threadIdx.x * VEC;
//@section kTail

}
