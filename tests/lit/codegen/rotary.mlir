// te.rotary: one block per position, one thread per vector of channel pairs
// (i, i + d/2), sines and cosines taken once and reused over the rows; sbhd
// and bshd addressing; the inverse (the gradient) swaps the signs of sin.
// RUN: te-compile %s --inference --emit=cuda | FileCheck %s
// RUN: te-compile %examples/llama_small.json --emit=cuda | FileCheck %s --check-prefix=LLAMA

// CHECK-LABEL: ===== kernel rope_sbhd_rotary_0: grid (16, 1, 1), block (64, 1, 1)
// CHECK: // params: in x; in freqs; out v0;
// CHECK: extern "C" __global__ void __launch_bounds__(64)
// CHECK: rope_sbhd_rotary_0(
// CHECK-NEXT: const tj_bf16 *__restrict__ x,
// CHECK-NEXT: const float *__restrict__ freqs,
// CHECK-NEXT: tj_bf16 *__restrict__ v0,
// CHECK-NEXT: const int *tj_skip) {
// CHECK: constexpr int kVec = 8, kUnroll = 4;
// CHECK: constexpr tj_i64 kRows = 32, kDim = 128, kRot = 128, kHalf = 64;
// CHECK: constexpr tj_i64 kPairVecs = 8, kRowsPerPass = 8;
// CHECK: const tj_i64 s = blockIdx.x;
// CHECK: const tj_i64 col = threadIdx.x % kPairVecs * kVec;
// CHECK: tj_load(f_lo, freqs + s * kRot + col);
// CHECK: tj_load(f_hi, freqs + s * kRot + kHalf + col);
// CHECK: sincosf(f_lo[i], &sin_lo[i], &cos_lo[i]);
// CHECK: if (f_hi[i] == f_lo[i]) sin_hi[i] = sin_lo[i], cos_hi[i] = cos_lo[i];
// CHECK-NEXT: else sincosf(f_hi[i], &sin_hi[i], &cos_hi[i]);
// CHECK: const tj_i64 base = (s * kRows + r) * kDim + col;
// CHECK-NEXT: tj_load(lo[u], x + base);
// CHECK-NEXT: tj_load(hi[u], x + base + kHalf);
// CHECK: lo_out[i] = lo[u][i] * cos_lo[i] - hi[u][i] * sin_lo[i];
// CHECK-NEXT: hi_out[i] = hi[u][i] * cos_hi[i] + lo[u][i] * sin_hi[i];
// CHECK: tj_store(v0 + base, lo_out);
// CHECK-NEXT: tj_store(v0 + base + kHalf, hi_out);
// CHECK-NOT: kPassVec
func.func @rope_sbhd(%x: tensor<16x2x16x128xbf16> {te.name = "x"},
                     %f: tensor<16x1x1x128xf32> {te.name = "freqs"})
    -> tensor<16x2x16x128xbf16> {
  %y = te.rotary %x, %f {qkv_format = #te.qkv_format<sbhd>}
      : tensor<16x2x16x128xbf16>, tensor<16x1x1x128xf32>
      -> tensor<16x2x16x128xbf16>
  return %y : tensor<16x2x16x128xbf16>
}

// A narrow head still gets a warp: 6 pair vectors x 6 rows.
// CHECK-LABEL: ===== kernel rope_bshd_inverse_rotary_0: grid (16, 1, 1), block (36, 1, 1)
// CHECK: constexpr tj_i64 kRows = 8, kDim = 96, kRot = 96, kHalf = 48;
// CHECK: constexpr tj_i64 kSeq = 16, kHeads = 4;
// CHECK: constexpr tj_i64 kPairVecs = 6, kRowsPerPass = 6;
// CHECK: const tj_i64 base = ((r / kHeads * kSeq + s) * kHeads + r % kHeads) * kDim + col;
// CHECK: lo_out[i] = lo[u][i] * cos_lo[i] + hi[u][i] * sin_lo[i];
// CHECK-NEXT: hi_out[i] = hi[u][i] * cos_hi[i] - lo[u][i] * sin_hi[i];
func.func @rope_bshd_inverse(%x: tensor<2x16x4x96xf16>,
                             %f: tensor<16x1x1x96xf32>)
    -> tensor<2x16x4x96xf16> {
  %y = te.rotary %x, %f {qkv_format = #te.qkv_format<bshd>, inverse}
      : tensor<2x16x4x96xf16>, tensor<16x1x1x96xf32> -> tensor<2x16x4x96xf16>
  return %y : tensor<2x16x4x96xf16>
}

// Partial rotary (GPT-NeoX's rotary_pct): the table is 32 of the 128
// channels wide; the pairs are (i, i + 16), and the other 96 channels are
// copied through, 8 at a time.
// CHECK-LABEL: ===== kernel rope_partial_rotary_0: grid (16, 1, 1), block (32, 1, 1)
// CHECK: constexpr tj_i64 kRows = 32, kDim = 128, kRot = 32, kHalf = 16;
// CHECK: constexpr tj_i64 kPassVec = 8, kPassVecs = 12;
// CHECK: tj_load(f_lo, freqs + s * kRot + col);
// CHECK: tj_load(hi[u], x + base + kHalf);
// CHECK: for (tj_i64 i = threadIdx.x; i < kRows * kPassVecs; i += blockDim.x)
// CHECK-NEXT: const tj_i64 r = i / kPassVecs;
// CHECK-NEXT: const tj_i64 c = kRot + i % kPassVecs * kPassVec;
// CHECK-NEXT: float v[kPassVec];
// CHECK-NEXT: tj_load(v, x + (s * kRows + r) * kDim + c);
// CHECK-NEXT: tj_store(v0 + (s * kRows + r) * kDim + c, v);
func.func @rope_partial(%x: tensor<16x2x16x128xbf16> {te.name = "x"},
                        %f: tensor<16x1x1x32xf32> {te.name = "freqs"})
    -> tensor<16x2x16x128xbf16> {
  %y = te.rotary %x, %f {qkv_format = #te.qkv_format<sbhd>}
      : tensor<16x2x16x128xbf16>, tensor<16x1x1x32xf32>
      -> tensor<16x2x16x128xbf16>
  return %y : tensor<16x2x16x128xbf16>
}

// Interleaved (GPT-J's layout) and partial, bshd: a thread loads 4 whole
// pairs (8 elements) and their 8 angles as one vector each, splits them
// into lower and upper elements, and stores them back interleaved.
// CHECK-LABEL: ===== kernel rope_interleaved_rotary_0:
// CHECK: constexpr int kVec = 4, kUnroll = 4;
// CHECK: constexpr tj_i64 kRows = 8, kDim = 256, kRot = 64;
// CHECK: constexpr tj_i64 kPassVec = 8, kPassVecs = 24;
// CHECK: tj_load(pairs, freqs + s * kRot + 2 * col);
// CHECK: for (int i = 0; i < kVec; ++i) f_lo[i] = pairs[2 * i], f_hi[i] = pairs[2 * i + 1];
// CHECK: const tj_i64 base = ((r / kHeads * kSeq + s) * kHeads + r % kHeads) * kDim + 2 * col;
// CHECK: float pairs[2 * kVec];
// CHECK-NEXT: tj_load(pairs, x + base);
// CHECK: lo_out[i] = lo[u][i] * cos_lo[i] - hi[u][i] * sin_lo[i];
// CHECK-NEXT: hi_out[i] = hi[u][i] * cos_hi[i] + lo[u][i] * sin_hi[i];
// CHECK: for (int i = 0; i < kVec; ++i) pairs[2 * i] = lo_out[i], pairs[2 * i + 1] = hi_out[i];
// CHECK-NEXT: tj_store(v0 + base, pairs);
func.func @rope_interleaved(%x: tensor<2x16x4x256xbf16> {te.name = "x"},
                            %f: tensor<16x1x1x64xf32> {te.name = "freqs"})
    -> tensor<2x16x4x256xbf16> {
  %y = te.rotary %x, %f {qkv_format = #te.qkv_format<bshd>, interleaved}
      : tensor<2x16x4x256xbf16>, tensor<16x1x1x64xf32>
      -> tensor<2x16x4x256xbf16>
  return %y : tensor<2x16x4x256xbf16>
}

// Llama's q and k (sbhd, head dim 32) forward, read in place from the QKV
// projection (tokens 256 elements apart), and their gradients inverse.
// LLAMA-LABEL: ===== kernel llama_small_rotary_0: grid (64, 1, 1), block (32, 1, 1)
// LLAMA: constexpr tj_i64 kBatch = 2, kHeads = 4;
// LLAMA: constexpr tj_i64 kTokenStride = 256;
// LLAMA: const tj_i64 base = (s * kBatch + r / kHeads) * kTokenStride + r % kHeads * kDim + col;
// LLAMA: lo_out[i] = lo[u][i] * cos_lo[i] - hi[u][i] * sin_lo[i];
// LLAMA: const tj_i64 base = (s * kRows + r) * kDim + col;
// LLAMA-NEXT: tj_store(v{{[0-9]+}} + base, lo_out);
// LLAMA-LABEL: ===== kernel llama_small_backward_rotary_0: grid (64, 1, 1), block (32, 1, 1)
// LLAMA: lo_out[i] = lo[u][i] * cos_lo[i] + hi[u][i] * sin_lo[i];
// LLAMA-NEXT: hi_out[i] = hi[u][i] * cos_hi[i] - lo[u][i] * sin_hi[i];
