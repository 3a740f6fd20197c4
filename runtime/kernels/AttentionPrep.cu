// Runtime helper kernels (attention steps, the dropout state, weight-cast flags), compiled to PTX at build time
// (runtime/CMakeLists.txt) and loaded by the driver's JIT on first use.
//
// tejit_attention_prep, one block, a thread per batch row:
//  - padding masks (`[b, 1, 1, s]` bytes, nonzero = masked out, Transformer
//    Engine's convention) become cuDNN's int32 sequence lengths: the count
//    of unmasked positions, taken as a right-padded prefix as TE's fused
//    attention does;
//  - the program's dropout state (seed, offset) is copied with the offset
//    moved by `offset_delta`, so each attention site of a program draws its
//    own Philox stream instead of repeating the first site's mask.
extern "C" __global__ void
tejit_attention_prep(const unsigned char *mask, int batch, int seq,
                     int *seq_lens, const unsigned long long *rng_in,
                     unsigned long long *rng_out,
                     unsigned long long offset_delta) {
  for (int row = threadIdx.x; mask && row < batch; row += blockDim.x) {
    const unsigned char *bytes = mask + (long long)row * seq;
    int kept = 0;
    for (int j = 0; j < seq; ++j)
      kept += bytes[j] == 0;
    seq_lens[row] = kept;
  }
  if (rng_in && threadIdx.x == 0) {
    rng_out[0] = rng_in[0];
    rng_out[1] = rng_in[1] + offset_delta;
  }
}

// Moves a program's dropout state (seed, offset) on by `delta` after a
// forward, on the device, so a forward captured in a CUDA graph draws fresh
// masks at every replay.
extern "C" __global__ void tejit_rng_advance(unsigned long long *state,
                                             unsigned long long delta) {
  if (threadIdx.x == 0)
    state[1] += delta;
}

// Copies `bytes` from `from` to `to` unless *flag is nonzero, decided on the
// device at each launch: a weight's scale_inv kept with its cast, in a CUDA
// graph that replays both for micro-batches that cast the weights and for
// ones that reuse the casts (Executor::run's skip flag).
extern "C" __global__ void tejit_copy_unless_flag(const int *flag,
                                                  unsigned char *to,
                                                  const unsigned char *from,
                                                  unsigned long long bytes) {
  if (*flag != 0)
    return;
  for (unsigned long long i = threadIdx.x; i < bytes; i += blockDim.x)
    to[i] = from[i];
}
