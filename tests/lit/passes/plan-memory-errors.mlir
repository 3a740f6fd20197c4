// RUN: te-opt %s --te-plan-memory -verify-diagnostics -split-input-file --allow-unregistered-dialect

// Intermediates need a size known at compile time; every one that has none
// is reported.
func.func @dynamic(%x: tensor<?xf32>, %y: tensor<?x4xf32>) -> tensor<?xf32> {
  // expected-error @+1 {{'te.add' op result #0 needs a static shape for te-plan-memory, got 'tensor<?xf32>'}}
  %a = te.add %x, %x : tensor<?xf32>
  // expected-error @+1 {{'te.add' op result #0 needs a static shape for te-plan-memory, got 'tensor<?x4xf32>'}}
  %b = te.add %y, %y : tensor<?x4xf32>
  %c = te.add %a, %a : tensor<?xf32>
  return %c : tensor<?xf32>
}

// -----

func.func @index(%x: tensor<4xindex>) -> tensor<4xindex> {
  // expected-error @+1 {{'te.add' op result #0 has an element type te-plan-memory cannot size: 'index'}}
  %a = te.add %x, %x : tensor<4xindex>
  %b = te.add %a, %a : tensor<4xindex>
  return %b : tensor<4xindex>
}

// -----

// expected-error @+1 {{'func.func' op te-plan-memory needs a single-block function}}
func.func @blocks(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
^bb1:
  return %x : tensor<4xf32>
}

// -----

// Values read inside nested regions would escape the block's liveness.
func.func @regions(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'test.region' op has regions, which te-plan-memory does not handle}}
  %a = "test.region"(%x) ({
    "test.yield"(%x) : (tensor<4xf32>) -> ()
  }) : (tensor<4xf32>) -> tensor<4xf32>
  return %a : tensor<4xf32>
}
