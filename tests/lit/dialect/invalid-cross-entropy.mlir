// RUN: te-opt %s -split-input-file -verify-diagnostics

// Diagnostics of the cross entropy ops (dialects/TELossVerifiers.cpp,
// docs/cross-entropy.md): one case per rule. Target values (in [0, V) or
// ignore_index) are data, not checked here.

func.func @stats_logits_rank(%x: tensor<2x6x100xbf16>, %y: tensor<12xi64>) {
  // expected-error @+1 {{'te.cross_entropy_stats' op 'logits' must be a bf16, f16 or f32 matrix [rows, vocab_local], got 'tensor<2x6x100xbf16>'}}
  %s = te.cross_entropy_stats %x, %y
      : (tensor<2x6x100xbf16>, tensor<12xi64>) -> tensor<12x4xf32>
  return
}

// -----

func.func @stats_logits_type(%x: tensor<6x100xf8E4M3FN>, %y: tensor<6xi64>) {
  // expected-error @+1 {{'logits' must be a bf16, f16 or f32 matrix}}
  %s = te.cross_entropy_stats %x, %y
      : (tensor<6x100xf8E4M3FN>, tensor<6xi64>) -> tensor<6x4xf32>
  return
}

// -----

func.func @stats_target_float(%x: tensor<6x100xbf16>, %y: tensor<6xf32>) {
  // expected-error @+1 {{'target' must be an i32 or i64 vector [rows], got 'tensor<6xf32>'}}
  %s = te.cross_entropy_stats %x, %y
      : (tensor<6x100xbf16>, tensor<6xf32>) -> tensor<6x4xf32>
  return
}

// -----

func.func @stats_target_rows(%x: tensor<6x100xbf16>, %y: tensor<5xi64>) {
  // expected-error @+1 {{'target' must have one class index per row (6), got 'tensor<5xi64>'}}
  %s = te.cross_entropy_stats %x, %y
      : (tensor<6x100xbf16>, tensor<5xi64>) -> tensor<6x4xf32>
  return
}

// -----

func.func @stats_vocab_start(%x: tensor<6x100xbf16>, %y: tensor<6xi64>) {
  // expected-error @+1 {{vocab_start must be >= 0, got -100}}
  %s = te.cross_entropy_stats %x, %y {vocab_start = -100}
      : (tensor<6x100xbf16>, tensor<6xi64>) -> tensor<6x4xf32>
  return
}

// -----

func.func @stats_result(%x: tensor<6x100xbf16>, %y: tensor<6xi64>) {
  // expected-error @+1 {{'stats' must be 'tensor<6x4xf32>' (max, sum of exponentials, target logit and sum per row), got 'tensor<6x3xf32>'}}
  %s = te.cross_entropy_stats %x, %y
      : (tensor<6x100xbf16>, tensor<6xi64>) -> tensor<6x3xf32>
  return
}

// -----

func.func @loss_ranks(%s: tensor<6x4xf32>, %y: tensor<6xi64>) {
  // expected-error @+1 {{'te.cross_entropy_loss' op ranks must be at least 1, got 0}}
  %l, %lse = te.cross_entropy_loss %s, %y {vocab_size = 100, ranks = 0}
      : (tensor<6x4xf32>, tensor<6xi64>) -> (tensor<6xf32>, tensor<6xf32>)
  return
}

// -----

func.func @loss_vocab(%s: tensor<6x4xf32>, %y: tensor<6xi64>) {
  // expected-error @+1 {{vocab_size must be at least 1, got 0}}
  %l, %lse = te.cross_entropy_loss %s, %y {vocab_size = 0}
      : (tensor<6x4xf32>, tensor<6xi64>) -> (tensor<6xf32>, tensor<6xf32>)
  return
}

// -----

func.func @loss_smoothing(%s: tensor<6x4xf32>, %y: tensor<6xi64>) {
  // expected-error @+1 {{label_smoothing must be in [0, 1], got 1.500000e+00}}
  %l, %lse = te.cross_entropy_loss %s, %y
      {vocab_size = 100, label_smoothing = 1.5}
      : (tensor<6x4xf32>, tensor<6xi64>) -> (tensor<6xf32>, tensor<6xf32>)
  return
}

// -----

func.func @loss_stats_of_ranks(%s: tensor<6x4xf32>, %y: tensor<6xi64>) {
  // expected-error @+1 {{'stats' must be 'tensor<12x4xf32>' (ranks x rows statistics, rank by rank), got 'tensor<6x4xf32>'}}
  %l, %lse = te.cross_entropy_loss %s, %y {vocab_size = 100, ranks = 2}
      : (tensor<6x4xf32>, tensor<6xi64>) -> (tensor<6xf32>, tensor<6xf32>)
  return
}

// -----

func.func @loss_result(%s: tensor<6x4xf32>, %y: tensor<6xi64>) {
  // expected-error @+1 {{'lse' must be 'tensor<6xf32>' (one per row), got 'tensor<6xbf16>'}}
  %l, %lse = te.cross_entropy_loss %s, %y {vocab_size = 100}
      : (tensor<6x4xf32>, tensor<6xi64>) -> (tensor<6xf32>, tensor<6xbf16>)
  return
}

// -----

func.func @mean_target(%l: tensor<6xf32>, %y: tensor<4xi64>) {
  // expected-error @+1 {{'te.cross_entropy_mean' op 'target' must have one class index per row (6), got 'tensor<4xi64>'}}
  %m, %c = te.cross_entropy_mean %l, %y
      : (tensor<6xf32>, tensor<4xi64>) -> (tensor<1xf32>, tensor<1xf32>)
  return
}

// -----

func.func @mean_result(%l: tensor<6xf32>, %y: tensor<6xi64>) {
  // expected-error @+1 {{'mean' must be 'tensor<1xf32>' (one value), got 'tensor<f32>'}}
  %m, %c = te.cross_entropy_mean %l, %y
      : (tensor<6xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<1xf32>)
  return
}

// -----

func.func @bwd_columns(%x: tensor<6x64xf32>, %y: tensor<6xi64>,
                       %lse: tensor<6xf32>, %g: tensor<6xf32>) {
  // expected-error @+1 {{'te.cross_entropy_bwd' op the logits' columns [32, 96) must lie in the vocab [0, 64)}}
  %dx = te.cross_entropy_bwd %x, %y, %lse, %g {vocab_size = 64, vocab_start = 32}
      : (tensor<6x64xf32>, tensor<6xi64>, tensor<6xf32>, tensor<6xf32>)
      -> tensor<6x64xf32>
  return
}

// -----

func.func @bwd_lse(%x: tensor<6x64xf32>, %y: tensor<6xi64>,
                   %lse: tensor<6x1xf32>, %g: tensor<6xf32>) {
  // expected-error @+1 {{'lse' must be 'tensor<6xf32>' (one per row), got 'tensor<6x1xf32>'}}
  %dx = te.cross_entropy_bwd %x, %y, %lse, %g {vocab_size = 64}
      : (tensor<6x64xf32>, tensor<6xi64>, tensor<6x1xf32>, tensor<6xf32>)
      -> tensor<6x64xf32>
  return
}

// -----

func.func @bwd_grad_per_row(%x: tensor<6x64xf32>, %y: tensor<6xi64>,
                            %lse: tensor<6xf32>, %g: tensor<1xf32>) {
  // expected-error @+1 {{'grad_loss' must be 'tensor<6xf32>' (one per row, without a count), got 'tensor<1xf32>'}}
  %dx = te.cross_entropy_bwd %x, %y, %lse, %g {vocab_size = 64}
      : (tensor<6x64xf32>, tensor<6xi64>, tensor<6xf32>, tensor<1xf32>)
      -> tensor<6x64xf32>
  return
}

// -----

func.func @bwd_grad_of_mean(%x: tensor<6x64xf32>, %y: tensor<6xi64>,
                            %lse: tensor<6xf32>, %g: tensor<6xf32>,
                            %c: tensor<1xf32>) {
  // expected-error @+1 {{'grad_loss' must be 'tensor<1xf32>' (the mean's gradient, given a count), got 'tensor<6xf32>'}}
  %dx = te.cross_entropy_bwd %x, %y, %lse, %g count(%c) {vocab_size = 64}
      : (tensor<6x64xf32>, tensor<6xi64>, tensor<6xf32>, tensor<6xf32>,
         tensor<1xf32>) -> tensor<6x64xf32>
  return
}

// -----

func.func @bwd_count(%x: tensor<6x64xf32>, %y: tensor<6xi64>,
                     %lse: tensor<6xf32>, %g: tensor<1xf32>,
                     %c: tensor<1xi64>) {
  // expected-error @+1 {{'count' must be 'tensor<1xf32>' (the mean's), got 'tensor<1xi64>'}}
  %dx = te.cross_entropy_bwd %x, %y, %lse, %g count(%c) {vocab_size = 64}
      : (tensor<6x64xf32>, tensor<6xi64>, tensor<6xf32>, tensor<1xf32>,
         tensor<1xi64>) -> tensor<6x64xf32>
  return
}

// -----

func.func @bwd_smoothing(%x: tensor<6x64xf32>, %y: tensor<6xi64>,
                         %lse: tensor<6xf32>, %g: tensor<6xf32>) {
  // expected-error @+1 {{label_smoothing must be in [0, 1], got -5.000000e-01}}
  %dx = te.cross_entropy_bwd %x, %y, %lse, %g
      {vocab_size = 64, label_smoothing = -0.5}
      : (tensor<6x64xf32>, tensor<6xi64>, tensor<6xf32>, tensor<6xf32>)
      -> tensor<6x64xf32>
  return
}

// -----

func.func @bwd_grad_type(%x: tensor<6x64xbf16>, %y: tensor<6xi64>,
                         %lse: tensor<6xf32>, %g: tensor<6xf32>) {
  // expected-error @+1 {{'grad' must have the logits' type 'tensor<6x64xbf16>', got 'tensor<6x64xf32>'}}
  %dx = te.cross_entropy_bwd %x, %y, %lse, %g {vocab_size = 64}
      : (tensor<6x64xbf16>, tensor<6xi64>, tensor<6xf32>, tensor<6xf32>)
      -> tensor<6x64xf32>
  return
}
