//===- Interpreter.h - reference interpreter for te IR ----------*- C++ -*-===//
//
// Executes a func.func of te ops on the CPU, in double precision, with the
// semantics of Transformer Engine's modules: the reference that shows a
// compiler pass keeps the meaning of the IR. Element types only say how a
// value is stored: every tensor is computed exactly (no bf16/fp16 rounding)
// and `fp8_recipe` attributes are ignored (FP8 casts are explicit ops).
//
// Conventions the op definitions leave open:
// - Layer ops run as in training: their dropouts apply, keyed by Options and
//   the streams of DropoutRng.h (as te.dropout and te.attention are keyed by
//   their `rng_state`).
// - Padding masks hide keys only; a query row whose keys are all masked gives
//   output 0 and softmax_lse -inf (and zero gradients).
// - te.attention_bwd computes what fused kernels do: probabilities from the
//   `softmax_lse` operand and the softmax correction rowsum(grad * output),
//   the exact gradient when those operands come from te.attention.
// - te.rotary with `inverse` negates the sine; that is the gradient when
//   `freqs` repeats its first half, as Transformer Engine lays it out.
// - te.fp8_attention(_bwd) are te.attention(_bwd) on the dequantized FP8
//   operands, computed exactly (the GPU's FP8 casts of the softmax output
//   and of dS inside cuDNN are not modelled), outputs cast as te.quantize
//   casts, amaxes exact (QuantizedOps.cpp).
// - FP8 tensors (f8E4M3FN, f8E5M2) hold doubles that their type represents;
//   scale bookkeeping (te.compute_scale, te.block_quantize's block scales,
//   te.delayed_scaling_update) runs in float32 to be bit-exact
//   (QuantizedOps.cpp, ScalingKernels.cpp, BlockScalingKernels.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_COMPILER_INTERPRETER_INTERPRETER_H
#define TEJIT_COMPILER_INTERPRETER_INTERPRETER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>
#include <random>
#include <vector>

namespace tejit::interp {

/// A dense tensor, row-major. Booleans (i1) are 0 or 1; integers must be
/// exact in a double (magnitude at most 2^53).
struct Tensor {
  llvm::SmallVector<int64_t> shape;
  std::vector<double> data;

  Tensor() = default;
  Tensor(llvm::ArrayRef<int64_t> shape, std::vector<double> data)
      : shape(shape), data(std::move(data)) {}

  /// A zero-filled tensor of `shape`.
  static Tensor zeros(llvm::ArrayRef<int64_t> shape);

  /// The product of the dims (1 for a scalar).
  int64_t numElements() const;
};

/// The other ranks of the group a program runs in, for a run of one rank's
/// program (tests run one interpreter per rank, in threads): te.tp_all_reduce
/// and the row-parallel GEMMs of tensor-parallel layer ops sum over the
/// ranks, te.amax_allreduce takes the maximum, sequence parallelism gathers
/// and scatters slices of dim 0. Every rank calls them in the same order.
/// Without one, a run is one process: sums and maxima are the identity, and
/// gathers and scatters are errors.
class Collectives {
public:
  virtual ~Collectives();
  /// The element-wise sum over the ranks of each rank's `local`.
  virtual Tensor sum(const Tensor &local) = 0;
  /// The element-wise maximum over the ranks.
  virtual Tensor max(const Tensor &local) = 0;
  /// Sequence parallelism: the ranks' `local` tensors (same shape)
  /// concatenated along dim 0 in rank order; `rank` is the caller's.
  virtual Tensor allGather(const Tensor &local, int64_t rank) = 0;
};

/// What a run needs besides the arguments.
struct Options {
  /// Seed and offset of the dropouts inside layer ops (te.dropout and
  /// te.attention take theirs from their `rng_state` operand).
  uint64_t seed = 0, offset = 0;
  /// When set, receives every argument's tensor after the run: the KV caches
  /// te.kv_cache_attention writes in place, the others as given.
  std::vector<Tensor> *updatedArguments = nullptr;
  /// The ranks' collectives; null: one process.
  Collectives *collectives = nullptr;
  /// This run's rank in the group: sequence parallelism's gathers and
  /// scatters place its slice at chunk `rank` of dim 0.
  int64_t rank = 0;
};

/// Runs `function` (te ops and a func.return in one block) on `args`, one per
/// argument, each shaped as its ranked tensor type says. Returns the values
/// of the func.return. Invalid IR, unsupported ops and arguments of the wrong
/// shape are reported as MLIR diagnostics (at the op or the function).
mlir::FailureOr<std::vector<Tensor>> run(mlir::func::FuncOp function,
                                         llvm::ArrayRef<Tensor> args,
                                         const Options &options = {});

/// A tensor of `type` (static shape) with random elements drawn from `rng`:
/// normal(0, stddev) for floats, 0 or 1 with equal chance for i1, uniform in
/// [0, 2^31) for other integers.
Tensor randomTensor(mlir::RankedTensorType type, std::mt19937_64 &rng,
                    double stddev = 1.0);

} // namespace tejit::interp

#endif // TEJIT_COMPILER_INTERPRETER_INTERPRETER_H
