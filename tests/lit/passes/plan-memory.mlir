// RUN: te-opt %s --te-plan-memory -split-input-file | FileCheck %s
// RUN: te-compile %examples/quickstart_small.yaml --emit=autodiff | te-opt --te-plan-memory | FileCheck %s --check-prefix=QUICK
// RUN: te-compile %examples/llama_small.json --emit=autodiff | te-opt --te-plan-memory | FileCheck %s --check-prefix=PLANNED
// RUN: te-compile %examples/all_layers_small.yaml --emit=autodiff | te-opt --te-plan-memory | FileCheck %s --check-prefix=PLANNED
// RUN: te-compile %examples/attention_small.yaml --emit=autodiff | te-opt --te-plan-memory | FileCheck %s --check-prefix=PLANNED
// RUN: te-compile %examples/quickstart.yaml --emit=primitive --inference | te-opt --te-plan-memory | FileCheck %s --check-prefix=INFER

// Sizes below are in units of 256 bytes, the alignment: tensor<64xf32> is 1.

// A buffer whose last reader has run is reused: %c takes %a's bytes. An
// op's results never share bytes with its operands (kernels are not assumed
// to work in place), so %b does not take them.
// CHECK-LABEL: func.func @reuse
// CHECK-SAME:  attributes {te.arena_bytes = 512 : i64, te.peak_live_bytes = 512 : i64}
// CHECK:       te.add {{.*}} {te.offsets = [0]}
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [256]}
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [0]}
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [-1]}
func.func @reuse(%x: tensor<64xf32>) -> tensor<64xf32> {
  %a = te.add %x, %x : tensor<64xf32>
  %b = te.add %a, %a : tensor<64xf32>
  %c = te.add %b, %b : tensor<64xf32>
  %d = te.add %c, %c : tensor<64xf32>
  return %d : tensor<64xf32>
}

// -----

// Largest first, each into the smallest gap that fits: when %s is placed,
// %a (3 units at 1024) and %b (1 unit at 2304) are dead, and %s takes %b's
// gap, not the lower and larger one of %a.
// CHECK-LABEL: func.func @best_fit
// CHECK-SAME:  attributes {te.arena_bytes = 2816 : i64, te.peak_live_bytes = 2816 : i64}
// CHECK:       %[[K1:.*]] = te.add {{.*}} {te.offsets = [0]} : tensor<256xf32>
// CHECK-NEXT:  %[[A:.*]] = te.add {{.*}} {te.offsets = [1024]} : tensor<192xf32>
// CHECK-NEXT:  %[[K2:.*]] = te.add {{.*}} {te.offsets = [1792]} : tensor<128xf32>
// CHECK-NEXT:  %[[B:.*]] = te.add {{.*}} {te.offsets = [2304]} : tensor<64xf32>
// CHECK-NEXT:  %[[K3:.*]] = te.add {{.*}} {te.offsets = [2560]} : tensor<64xf32>
// CHECK-NEXT:  te.concat %[[A]], %[[B]] {te.offsets = [-1]}
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [2304]} : tensor<64xf32>
func.func @best_fit(%x64: tensor<64xf32>, %x128: tensor<128xf32>,
                    %x192: tensor<192xf32>, %x256: tensor<256xf32>)
    -> (tensor<256xf32>, tensor<512xf32>) {
  %k1 = te.add %x256, %x256 : tensor<256xf32>
  %a = te.add %x192, %x192 : tensor<192xf32>
  %k2 = te.add %x128, %x128 : tensor<128xf32>
  %b = te.add %x64, %x64 : tensor<64xf32>
  %k3 = te.add %x64, %x64 : tensor<64xf32>
  %u = te.concat %a, %b : tensor<192xf32>, tensor<64xf32> -> tensor<256xf32>
  %s = te.add %x64, %x64 : tensor<64xf32>
  %r = te.concat %k1, %k2, %k3, %s
      : tensor<256xf32>, tensor<128xf32>, tensor<64xf32>, tensor<64xf32>
      -> tensor<512xf32>
  return %u, %r : tensor<256xf32>, tensor<512xf32>
}

// -----

// te.reshape owns no memory; reading a view (of a view) keeps the viewed
// buffer live, so %b cannot reuse %a's bytes although %a is not read again.
// CHECK-LABEL: func.func @views
// CHECK-SAME:  attributes {te.arena_bytes = 768 : i64, te.peak_live_bytes = 768 : i64}
// CHECK:       te.add {{.*}} {te.offsets = [0]} : tensor<64xf32>
// CHECK-NEXT:  te.reshape {{.*}} {te.offsets = [-1]}
// CHECK-NEXT:  te.reshape {{.*}} {te.offsets = [-1]}
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [256]} : tensor<8x8xf32>
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [512]} : tensor<8x8xf32>
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [-1]} : tensor<8x8xf32>
func.func @views(%x: tensor<64xf32>, %y: tensor<8x8xf32>) -> tensor<8x8xf32> {
  %a = te.add %x, %x : tensor<64xf32>
  %v = te.reshape %a : tensor<64xf32> -> tensor<2x32xf32>
  %w = te.reshape %v : tensor<2x32xf32> -> tensor<8x8xf32>
  %b = te.add %y, %y : tensor<8x8xf32>
  %c = te.add %w, %b : tensor<8x8xf32>
  %d = te.add %c, %c : tensor<8x8xf32>
  return %d : tensor<8x8xf32>
}

// -----

// Once no view of it is read any more, a buffer is free: %c, defined after
// the last reader of %v, reuses %a's bytes.
// CHECK-LABEL: func.func @view_ends
// CHECK-SAME:  te.arena_bytes = 512 : i64
// CHECK:       te.add {{.*}} {te.offsets = [0]}
// CHECK-NEXT:  te.reshape {{.*}} {te.offsets = [-1]}
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [256]}
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [0]}
func.func @view_ends(%x: tensor<64xf32>) -> tensor<8x8xf32> {
  %a = te.add %x, %x : tensor<64xf32>
  %v = te.reshape %a : tensor<64xf32> -> tensor<8x8xf32>
  %b = te.add %v, %v : tensor<8x8xf32>
  %c = te.add %b, %b : tensor<8x8xf32>
  %d = te.add %c, %c : tensor<8x8xf32>
  return %d : tensor<8x8xf32>
}

// -----

// Returned values, views of them and views of arguments are the caller's.
// CHECK-LABEL: func.func @returned
// CHECK-SAME:  attributes {te.arena_bytes = 256 : i64, te.peak_live_bytes = 256 : i64}
// CHECK:       te.add {{.*}} {te.offsets = [-1]}
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [0]}
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [-1]}
// CHECK-NEXT:  te.reshape {{.*}} {te.offsets = [-1]}
// CHECK-NEXT:  te.reshape {{.*}} {te.offsets = [-1]}
func.func @returned(%x: tensor<64xf32>)
    -> (tensor<64xf32>, tensor<8x8xf32>, tensor<8x8xf32>) {
  %a = te.add %x, %x : tensor<64xf32>
  %t = te.add %a, %a : tensor<64xf32>
  %b = te.add %t, %t : tensor<64xf32>
  %v = te.reshape %b : tensor<64xf32> -> tensor<8x8xf32>
  %w = te.reshape %x : tensor<64xf32> -> tensor<8x8xf32>
  return %a, %v, %w : tensor<64xf32>, tensor<8x8xf32>, tensor<8x8xf32>
}

// -----

// Sizes are elements x element bytes (i1 takes a byte), rounded up to 256.
// CHECK-LABEL: func.func @alignment
// CHECK-SAME:  attributes {te.arena_bytes = 2304 : i64, te.peak_live_bytes = 2304 : i64}
// CHECK:       te.add {{.*}} {te.offsets = [2048]} : tensor<3xbf16>
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [0]} : tensor<130xbf16>
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [512]} : tensor<300xi1>
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [1024]} : tensor<257xf8E4M3FN>
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [1536]} : tensor<64xi64>
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [-1]}
func.func @alignment(%p: tensor<3xbf16>, %q: tensor<130xbf16>,
                     %m: tensor<300xi1>, %f: tensor<257xf8E4M3FN>,
                     %i: tensor<64xi64>)
    -> (tensor<3xbf16>, tensor<130xbf16>, tensor<300xi1>,
        tensor<257xf8E4M3FN>, tensor<64xi64>) {
  %a = te.add %p, %p : tensor<3xbf16>
  %b = te.add %q, %q : tensor<130xbf16>
  %c = te.add %m, %m : tensor<300xi1>
  %d = te.add %f, %f : tensor<257xf8E4M3FN>
  %e = te.add %i, %i : tensor<64xi64>
  %a2 = te.add %a, %a : tensor<3xbf16>
  %b2 = te.add %b, %b : tensor<130xbf16>
  %c2 = te.add %c, %c : tensor<300xi1>
  %d2 = te.add %d, %d : tensor<257xf8E4M3FN>
  %e2 = te.add %e, %e : tensor<64xi64>
  return %a2, %b2, %c2, %d2, %e2 : tensor<3xbf16>, tensor<130xbf16>,
      tensor<300xi1>, tensor<257xf8E4M3FN>, tensor<64xi64>
}

// -----

// Every result of an op gets a buffer, read or not; unread ones die at once,
// and %w (4 units) reuses the bytes of the two statistics (1 unit each).
// CHECK-LABEL: func.func @results
// CHECK-SAME:  attributes {te.arena_bytes = 2048 : i64, te.peak_live_bytes = 2048 : i64}
// CHECK:       te.layernorm_fwd {{.*}} te.offsets = [0, 1024, 1280]
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [1024]}
// CHECK-NEXT:  te.add {{.*}} {te.offsets = [-1]}
func.func @results(%x: tensor<8x64xbf16>, %g: tensor<64xbf16>,
                   %b: tensor<64xbf16>) -> tensor<8x64xbf16> {
  %y, %mean, %rsigma = te.layernorm_fwd %x, %g, %b {eps = 1.0e-5 : f64}
      : (tensor<8x64xbf16>, tensor<64xbf16>, tensor<64xbf16>)
      -> (tensor<8x64xbf16>, tensor<8xf32>, tensor<8xf32>)
  %w = te.add %y, %y : tensor<8x64xbf16>
  %z = te.add %w, %w : tensor<8x64xbf16>
  return %z : tensor<8x64xbf16>
}

// -----

// Dynamic shapes are fine where the caller owns the buffer; declarations and
// functions without intermediates get an empty arena or none.
// CHECK-LABEL: func.func @dynamic_returned
// CHECK-SAME:  attributes {te.arena_bytes = 0 : i64, te.peak_live_bytes = 0 : i64}
// CHECK:       te.add {{.*}} {te.offsets = [-1]}
// CHECK:       func.func private @declaration(tensor<4xf32>) -> tensor<4xf32>{{$}}
func.func @dynamic_returned(%x: tensor<?xf32>) -> tensor<?xf32> {
  %a = te.add %x, %x : tensor<?xf32>
  return %a : tensor<?xf32>
}
func.func private @declaration(tensor<4xf32>) -> tensor<4xf32>

// -----

// q, k and v sliced out of a QKV projection are strided views of it (it
// stays live through the backward's reads), and the gradients attention
// writes are column ranges of their concat, whose buffer is live from the
// attention backward on: neither the slices nor the gradients get bytes.
// CHECK-LABEL: func.func @attention_views
// CHECK-SAME:  attributes {te.arena_bytes = 58368 : i64, te.peak_live_bytes = 58368 : i64}
// CHECK:       te.add {{.*}} {te.offsets = [0]}
// CHECK-NEXT:  te.slice {{.*}} {te.offsets = [-1]}
// CHECK:       te.attention {{.*}} te.offsets = [49152, 57344]
// CHECK-NEXT:  te.attention_bwd {{.*}} te.offsets = [-1, -1, -1]
// CHECK:       te.concat {{.*}} {te.offsets = [24576]}
func.func @attention_views(%x: tensor<64x192xbf16>, %dout: tensor<32x2x4x16xbf16>) -> tensor<64x192xbf16> {
  %qkv = te.add %x, %x : tensor<64x192xbf16>
  %q2 = te.slice %qkv[0] : tensor<64x192xbf16> -> tensor<64x64xbf16>
  %q = te.reshape %q2 : tensor<64x64xbf16> -> tensor<32x2x4x16xbf16>
  %k2 = te.slice %qkv[64] : tensor<64x192xbf16> -> tensor<64x64xbf16>
  %k = te.reshape %k2 : tensor<64x64xbf16> -> tensor<32x2x4x16xbf16>
  %v2 = te.slice %qkv[128] : tensor<64x192xbf16> -> tensor<64x64xbf16>
  %v = te.reshape %v2 : tensor<64x64xbf16> -> tensor<32x2x4x16xbf16>
  %o, %lse = te.attention %q, %k, %v {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64} : (tensor<32x2x4x16xbf16>, tensor<32x2x4x16xbf16>, tensor<32x2x4x16xbf16>) -> (tensor<32x2x4x16xbf16>, tensor<2x4x32xf32>)
  %dq, %dk, %dv = te.attention_bwd %dout, %q, %k, %v, %o, %lse {attn_mask_type = #te.attn_mask_type<causal>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64} : (tensor<32x2x4x16xbf16>, tensor<32x2x4x16xbf16>, tensor<32x2x4x16xbf16>, tensor<32x2x4x16xbf16>, tensor<32x2x4x16xbf16>, tensor<2x4x32xf32>) -> (tensor<32x2x4x16xbf16>, tensor<32x2x4x16xbf16>, tensor<32x2x4x16xbf16>)
  %dq2 = te.reshape %dq : tensor<32x2x4x16xbf16> -> tensor<64x64xbf16>
  %dk2 = te.reshape %dk : tensor<32x2x4x16xbf16> -> tensor<64x64xbf16>
  %dv2 = te.reshape %dv : tensor<32x2x4x16xbf16> -> tensor<64x64xbf16>
  %cat = te.concat %dq2, %dk2, %dv2 : tensor<64x64xbf16>, tensor<64x64xbf16>, tensor<64x64xbf16> -> tensor<64x192xbf16>
  %r = te.add %cat, %cat : tensor<64x192xbf16>
  return %r : tensor<64x192xbf16>
}

// -----

// A slice that anything but attention reads is a copy of its own.
// CHECK-LABEL: func.func @attention_slice_read_elsewhere
// CHECK:       te.slice {{.*}} {te.offsets = [{{[0-9]+}}]}
func.func @attention_slice_read_elsewhere(%qkv: tensor<64x192xbf16>) -> (tensor<32x2x4x16xbf16>, tensor<64x64xbf16>) {
  %q2 = te.slice %qkv[0] : tensor<64x192xbf16> -> tensor<64x64xbf16>
  %q = te.reshape %q2 : tensor<64x64xbf16> -> tensor<32x2x4x16xbf16>
  %k2 = te.slice %qkv[64] : tensor<64x192xbf16> -> tensor<64x64xbf16>
  %k = te.reshape %k2 : tensor<64x64xbf16> -> tensor<32x2x4x16xbf16>
  %o, %lse = te.attention %q, %k, %k {attn_mask_type = #te.attn_mask_type<no_mask>, qkv_format = #te.qkv_format<sbhd>, softmax_scale = 0.25 : f64} : (tensor<32x2x4x16xbf16>, tensor<32x2x4x16xbf16>, tensor<32x2x4x16xbf16>) -> (tensor<32x2x4x16xbf16>, tensor<2x4x32xf32>)
  %sum = te.add %q2, %q2 : tensor<64x64xbf16>
  return %o, %sum : tensor<32x2x4x16xbf16>, tensor<64x64xbf16>
}

// -----

// quickstart_small's plans, which tests/unit/PlanMemoryTest.cpp checks.
// QUICK-LABEL: func.func @quickstart_small(
// QUICK-SAME:  te.arena_bytes = 32768 : i64, te.peak_live_bytes = 32768 : i64
// QUICK:       te.reshape {{.*}} {te.offsets = [-1]}
// QUICK-NEXT:  te.layernorm_fwd {{.*}} te.offsets = [-1, -1, -1]
// QUICK-NEXT:  te.matmul {{.*}} te.offsets = [0]
// QUICK:       te.dropout {{.*}} te.offsets = [0]
// QUICK-LABEL: func.func @quickstart_small_backward(
// QUICK-SAME:  te.arena_bytes = 65536 : i64
// QUICK-SAME:  te.peak_live_bytes = 65536 : i64
// Attention's gradients are written into their concat's buffer.
// QUICK:       te.attention_bwd {{.*}} te.offsets = [-1, -1, -1]
// QUICK:       te.concat {{.*}}te.offsets = [{{[0-9]+}}]

// Every function of every example gets a plan.
// PLANNED:     func.func @{{[a-z_]+}}(
// PLANNED-SAME: te.arena_bytes = {{[0-9]+}} : i64
// PLANNED-SAME: te.peak_live_bytes = {{[0-9]+}} : i64
// PLANNED:     te.offsets = [
// PLANNED:     func.func @{{[a-z_]+}}_backward(
// PLANNED-SAME: te.arena_bytes = {{[0-9]+}} : i64
// PLANNED-SAME: te.peak_live_bytes = {{[0-9]+}} : i64

// The full-size quickstart layer in inference: at the peak, two FC1-sized
// buffers (2048 x 4 x 16384 bf16, 256 MiB each) and the residual stream
// (64 MiB) are live.
// INFER-LABEL: func.func @quickstart(
// INFER-SAME:  te.arena_bytes = 603979776 : i64, te.peak_live_bytes = 603979776 : i64
