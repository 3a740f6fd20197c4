// Cross entropy (docs/cross-entropy.md; codegen/LossKernels.cpp): a block
// per logits row walking it in 16-byte vectors, kUnroll loads in flight;
// the statistics kernel keeps an online max and sum of exponentials; the
// loss kernel merges the ranks' statistics a thread per row; the backward
// writes each vector's gradient where it read it (no __restrict__: the
// runtime may bind the gradient to the logits).
// RUN: te-compile %s --inference --emit=cuda | FileCheck %s

// CHECK-LABEL: ===== kernel ce_cross_entropy_stats_0: grid (64, 1, 1), block (512, 1, 1)
// CHECK: // params: in logits; in target; out v0;
// CHECK: const tj_bf16 *__restrict__ logits,
// CHECK-NEXT: const tj_i64 *__restrict__ target,
// CHECK-NEXT: float *__restrict__ v0,
// CHECK: constexpr int kThreads = 512, kVec = 8, kUnroll = 4;
// CHECK-NEXT: constexpr tj_i64 kCols = 32000;
// CHECK: if (ce_y == -100ll) {
// CHECK: for (int ce_u = 0; ce_u < kUnroll; ++ce_u) if (ce_base + ce_u * kStride < kCols) tj_load(ce_v[ce_u], ce_x + ce_base + ce_u * kStride);
// CHECK: if (ce_vmax > ce_m) { ce_d *= __expf(ce_m - ce_vmax); ce_m = ce_vmax; }
// CHECK: tj_block_softmax_stats(ce_m, ce_d, ce_s);
// CHECK: const tj_i64 ce_c = ce_y - 32000ll;
// CHECK: ce_out[2] = ce_c >= 0 && ce_c < kCols ? tj_to_float(ce_x[ce_c]) : __int_as_float(0xff800000);

// CHECK-LABEL: ===== kernel ce_cross_entropy_loss_0: grid (1, 1, 1), block (256, 1, 1)
// CHECK: // params: in v1; in target; out loss; out lse;
// CHECK: constexpr tj_i64 kRows = 64; constexpr int kRanks = 2;
// CHECK: if (ce_st[1] != 0.f) ce_d += ce_st[1] * expf(ce_st[0] - ce_m);
// CHECK: const float ce_l = ce_m + logf(ce_d);
// CHECK: loss[ce_row] = ce_l - 0.899999976f * ce_t - 1.56249996e-06f * ce_s;

// CHECK-LABEL: ===== kernel ce_cross_entropy_mean_0: grid (1, 1, 1), block (1024, 1, 1)
// CHECK: tj_block_sum2(ce_sum, ce_count);
// CHECK: mean[0] = ce_sum / fmaxf(ce_count, 1.f);

// CHECK-LABEL: ===== kernel ce_bwd_cross_entropy_bwd_0: grid (64, 1, 1), block (512, 1, 1)
// CHECK: // params: in logits; in target; in lse; in grad_loss; in count; out v0;
// CHECK: const tj_bf16 *logits,
// CHECK: tj_bf16 *v0,
// CHECK: const float ce_g = grad_loss[0] / fmaxf(count[0], 1.f);
// CHECK: const float ce_uniform = 1.56249996e-06f, ce_hit = 0.899999976f;
// CHECK: ce_out[ce_i] = (__expf(ce_v[ce_u][ce_i] - ce_l) - ce_uniform - (ce_col + ce_i == ce_c ? ce_hit : 0.f)) * ce_g;
// CHECK-NEXT: tj_store(ce_dx + ce_col, ce_out);

func.func @ce(%logits: tensor<64x32000xbf16> {te.name = "logits"},
              %target: tensor<64xi64> {te.name = "target"})
    -> (tensor<1xf32> {te.name = "mean"}, tensor<1xf32> {te.name = "count"},
        tensor<64xf32> {te.name = "lse"}) {
  %stats = te.cross_entropy_stats %logits, %target {vocab_start = 32000}
      : (tensor<64x32000xbf16>, tensor<64xi64>) -> tensor<64x4xf32>
  %all = te.tp_all_gather %stats {ranks = 2}
      : tensor<64x4xf32> -> tensor<128x4xf32>
  %loss, %lse = te.cross_entropy_loss %all, %target
      {vocab_size = 64000, label_smoothing = 0.1, ranks = 2}
      : (tensor<128x4xf32>, tensor<64xi64>) -> (tensor<64xf32>, tensor<64xf32>)
  %mean, %count = te.cross_entropy_mean %loss, %target
      : (tensor<64xf32>, tensor<64xi64>) -> (tensor<1xf32>, tensor<1xf32>)
  return %mean, %count, %lse : tensor<1xf32>, tensor<1xf32>, tensor<64xf32>
}

func.func @ce_bwd(%logits: tensor<64x32000xbf16> {te.name = "logits"},
                  %target: tensor<64xi64> {te.name = "target"},
                  %lse: tensor<64xf32> {te.name = "lse"},
                  %grad_loss: tensor<1xf32> {te.name = "grad_loss"},
                  %count: tensor<1xf32> {te.name = "count"})
    -> (tensor<64x32000xbf16> {te.name = "grad"}) {
  %grad = te.cross_entropy_bwd %logits, %target, %lse, %grad_loss
      count(%count) {vocab_size = 64000, vocab_start = 32000,
                     label_smoothing = 0.1}
      : (tensor<64x32000xbf16>, tensor<64xi64>, tensor<64xf32>, tensor<1xf32>,
         tensor<1xf32>) -> tensor<64x32000xbf16>
  return %grad : tensor<64x32000xbf16>
}
