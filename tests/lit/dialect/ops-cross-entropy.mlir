// RUN: te-opt %s | te-opt | FileCheck %s
// RUN: te-opt %s --mlir-print-op-generic | te-opt | FileCheck %s

// Transformer Engine's parallel_cross_entropy (docs/cross-entropy.md): one
// rank's row statistics, their gather over a vocab split in two, the loss
// and log-sum-exp per row, the mean over rows not ignored, and the
// gradient. Default attributes (vocab_start 0, ignore_index -100,
// label_smoothing 0, ranks 1) are elided.

// CHECK-LABEL: func.func @forward
// CHECK: %[[S:.*]] = te.cross_entropy_stats %arg0, %arg1 {vocab_start = 100 : i64} : (tensor<6x100xbf16>, tensor<6xi64>) -> tensor<6x4xf32>
// CHECK: %[[G:.*]] = te.tp_all_gather %[[S]] {ranks = 2 : i64} : tensor<6x4xf32> -> tensor<12x4xf32>
// CHECK: %[[L:.*]], %{{.*}} = te.cross_entropy_loss %[[G]], %arg1 {label_smoothing = 1.000000e-01 : f64, ranks = 2 : i64, vocab_size = 200 : i64} : (tensor<12x4xf32>, tensor<6xi64>) -> (tensor<6xf32>, tensor<6xf32>)
// CHECK: te.cross_entropy_mean %[[L]], %arg1 {ignore_index = 0 : i64} : (tensor<6xf32>, tensor<6xi64>) -> (tensor<1xf32>, tensor<1xf32>)
func.func @forward(%logits: tensor<6x100xbf16>, %target: tensor<6xi64>)
    -> (tensor<1xf32>, tensor<1xf32>, tensor<6xf32>) {
  %stats = te.cross_entropy_stats %logits, %target {vocab_start = 100}
      : (tensor<6x100xbf16>, tensor<6xi64>) -> tensor<6x4xf32>
  %all = te.tp_all_gather %stats {ranks = 2}
      : tensor<6x4xf32> -> tensor<12x4xf32>
  %loss, %lse = te.cross_entropy_loss %all, %target
      {vocab_size = 200, label_smoothing = 0.1, ranks = 2}
      : (tensor<12x4xf32>, tensor<6xi64>) -> (tensor<6xf32>, tensor<6xf32>)
  %mean, %count = te.cross_entropy_mean %loss, %target {ignore_index = 0}
      : (tensor<6xf32>, tensor<6xi64>) -> (tensor<1xf32>, tensor<1xf32>)
  return %mean, %count, %lse : tensor<1xf32>, tensor<1xf32>, tensor<6xf32>
}

// CHECK-LABEL: func.func @backward_per_row
// CHECK: te.cross_entropy_bwd %arg0, %arg1, %arg2, %arg3 {vocab_size = 64 : i64} : (tensor<6x64xf32>, tensor<6xi32>, tensor<6xf32>, tensor<6xf32>) -> tensor<6x64xf32>
func.func @backward_per_row(%logits: tensor<6x64xf32>, %target: tensor<6xi32>,
                            %lse: tensor<6xf32>, %grad: tensor<6xf32>)
    -> tensor<6x64xf32> {
  %dx = te.cross_entropy_bwd %logits, %target, %lse, %grad {vocab_size = 64}
      : (tensor<6x64xf32>, tensor<6xi32>, tensor<6xf32>, tensor<6xf32>)
      -> tensor<6x64xf32>
  return %dx : tensor<6x64xf32>
}

// CHECK-LABEL: func.func @backward_of_mean
// CHECK: te.cross_entropy_bwd %arg0, %arg1, %arg2, %arg3 count(%arg4) {ignore_index = -1 : i64, label_smoothing = 5.000000e-01 : f64, vocab_size = 128 : i64, vocab_start = 64 : i64} : (tensor<6x64xf16>, tensor<6xi64>, tensor<6xf32>, tensor<1xf32>, tensor<1xf32>) -> tensor<6x64xf16>
func.func @backward_of_mean(%logits: tensor<6x64xf16>, %target: tensor<6xi64>,
                            %lse: tensor<6xf32>, %grad: tensor<1xf32>,
                            %count: tensor<1xf32>) -> tensor<6x64xf16> {
  %dx = te.cross_entropy_bwd %logits, %target, %lse, %grad count(%count)
      {vocab_size = 128, vocab_start = 64, label_smoothing = 0.5,
       ignore_index = -1}
      : (tensor<6x64xf16>, tensor<6xi64>, tensor<6xf32>, tensor<1xf32>,
         tensor<1xf32>) -> tensor<6x64xf16>
  return %dx : tensor<6x64xf16>
}
