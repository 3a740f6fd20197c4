// RUN: te-opt %s | te-opt | FileCheck %s
// RUN: te-opt %s --mlir-print-op-generic | te-opt | FileCheck %s
// RUN: te-opt %s -emit-bytecode | te-opt | FileCheck %s

// FP8 recipe attributes. Parameters print in declaration order and only when
// they differ from Transformer Engine's defaults:
//   delayed_scaling: margin = 0, fp8_format = hybrid, amax_history_len = 1024,
//                    amax_compute_algo = max, reduce_amax = true
//   current_scaling: fp8_format = hybrid, power_2_scale = false
//   block_scaling:   fp8_format = e4m3, x/w/grad_block_scaling_dim = 1/2/1,
//                    power_2_scale = true
// Each distinct recipe is printed once, as a #delayed_scaling or
// #current_scaling alias at the top of the module.

// CHECK-DAG: #[[DS:delayed_scaling[0-9]*]] = #te.delayed_scaling<>
// CHECK-DAG: #[[DS_E4M3:delayed_scaling[0-9]*]] = #te.delayed_scaling<fp8_format = e4m3>
// CHECK-DAG: #[[DS_RECENT:delayed_scaling[0-9]*]] = #te.delayed_scaling<amax_history_len = 16, amax_compute_algo = most_recent>
// CHECK-DAG: #[[DS_ALL:delayed_scaling[0-9]*]] = #te.delayed_scaling<margin = 2, fp8_format = e4m3, amax_history_len = 1, amax_compute_algo = most_recent, reduce_amax = false>
// CHECK-DAG: #[[CS:current_scaling[0-9]*]] = #te.current_scaling<>
// CHECK-DAG: #[[CS_E4M3:current_scaling[0-9]*]] = #te.current_scaling<fp8_format = e4m3>
// CHECK-DAG: #[[CS_POW2:current_scaling[0-9]*]] = #te.current_scaling<power_2_scale = true>
// CHECK-DAG: #[[CS_ALL:current_scaling[0-9]*]] = #te.current_scaling<fp8_format = e4m3, power_2_scale = true>
// CHECK-DAG: #[[BS:block_scaling[0-9]*]] = #te.block_scaling<>
// CHECK-DAG: #[[BS_ALL:block_scaling[0-9]*]] = #te.block_scaling<fp8_format = hybrid, x_block_scaling_dim = 2, w_block_scaling_dim = 1, power_2_scale = false>

// Spelling out a default is the same as leaving it out.
// CHECK-LABEL: func.func @delayed_scaling_defaults
// CHECK-COUNT-3: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #[[DS]]} :
func.func @delayed_scaling_defaults(%x: tensor<16x64xbf16>,
                                    %w: tensor<64x64xbf16>) {
  %0 = te.linear %x weight(%w) {fp8_recipe = #te.delayed_scaling<>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  %1 = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<fp8_format = hybrid,
                                        amax_compute_algo = max>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  %2 = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<margin = 0, fp8_format = hybrid,
                                        amax_history_len = 1024,
                                        amax_compute_algo = max,
                                        reduce_amax = true>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// Non-default parameters, in any order on input.
// CHECK-LABEL: func.func @delayed_scaling_params
// CHECK: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #[[DS_E4M3]]} :
// CHECK: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #[[DS_RECENT]]} :
// CHECK: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #[[DS_ALL]]} :
func.func @delayed_scaling_params(%x: tensor<16x64xbf16>,
                                  %w: tensor<64x64xbf16>) {
  %0 = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<fp8_format = e4m3>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  %1 = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<amax_compute_algo = most_recent,
                                        amax_history_len = 16>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  %2 = te.linear %x weight(%w)
      {fp8_recipe = #te.delayed_scaling<reduce_amax = false, margin = 2,
                                        amax_history_len = 1,
                                        amax_compute_algo = most_recent,
                                        fp8_format = e4m3>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// CHECK-LABEL: func.func @current_scaling
// CHECK: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #[[CS]]} :
// CHECK: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #[[CS]]} :
// CHECK: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #[[CS_E4M3]]} :
// CHECK: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #[[CS_POW2]]} :
// CHECK: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #[[CS_ALL]]} :
func.func @current_scaling(%x: tensor<16x64xbf16>, %w: tensor<64x64xbf16>) {
  %0 = te.linear %x weight(%w) {fp8_recipe = #te.current_scaling<>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  %1 = te.linear %x weight(%w)
      {fp8_recipe = #te.current_scaling<fp8_format = hybrid,
                                        power_2_scale = false>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  %2 = te.linear %x weight(%w)
      {fp8_recipe = #te.current_scaling<fp8_format = e4m3>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  %3 = te.linear %x weight(%w)
      {fp8_recipe = #te.current_scaling<power_2_scale = true>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  %4 = te.linear %x weight(%w)
      {fp8_recipe = #te.current_scaling<power_2_scale = true,
                                        fp8_format = e4m3>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}

// A recipe written once as a user alias is printed through the dialect's
// alias, and one recipe may drive several layers.
#my_recipe = #te.delayed_scaling<amax_history_len = 16, amax_compute_algo = most_recent>

// CHECK-LABEL: func.func @shared_recipe
// CHECK: te.layernorm_linear {{.*}} {fp8_recipe = #[[DS_RECENT]]} :
// CHECK: te.layernorm_mlp {{.*}} {fp8_recipe = #[[DS_RECENT]]} :
func.func @shared_recipe(%x: tensor<16x64xbf16>, %g: tensor<64xbf16>,
                         %b: tensor<64xbf16>, %wqkv: tensor<192x64xbf16>,
                         %w1: tensor<256x64xbf16>, %w2: tensor<64x256xbf16>)
    -> (tensor<16x192xbf16>, tensor<16x64xbf16>) {
  %0 = te.layernorm_linear %x ln_weight(%g) ln_bias(%b) weight(%wqkv)
      {fp8_recipe = #my_recipe}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<192x64xbf16>) -> tensor<16x192xbf16>
  %1 = te.layernorm_mlp %x ln_weight(%g) ln_bias(%b) fc1_weight(%w1)
      fc2_weight(%w2) {fp8_recipe = #my_recipe}
      : (tensor<16x64xbf16>, tensor<64xbf16>, tensor<64xbf16>,
         tensor<256x64xbf16>, tensor<64x256xbf16>) -> tensor<16x64xbf16>
  return %0, %1 : tensor<16x192xbf16>, tensor<16x64xbf16>
}

// CHECK-LABEL: func.func @block_scaling
// CHECK-COUNT-2: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #[[BS]]} :
// CHECK: te.linear %{{.*}} weight(%{{.*}}) {fp8_recipe = #[[BS_ALL]]} :
func.func @block_scaling(%x: tensor<16x64xbf16>, %w: tensor<64x64xbf16>) {
  %0 = te.linear %x weight(%w) {fp8_recipe = #te.block_scaling<>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  %1 = te.linear %x weight(%w)
      {fp8_recipe = #te.block_scaling<fp8_format = e4m3, x_block_scaling_dim = 1,
                                      w_block_scaling_dim = 2,
                                      grad_block_scaling_dim = 1,
                                      power_2_scale = true>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  %2 = te.linear %x weight(%w)
      {fp8_recipe = #te.block_scaling<fp8_format = hybrid, x_block_scaling_dim = 2,
                                      w_block_scaling_dim = 1,
                                      power_2_scale = false>}
      : (tensor<16x64xbf16>, tensor<64x64xbf16>) -> tensor<16x64xbf16>
  return
}
