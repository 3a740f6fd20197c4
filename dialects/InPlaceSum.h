//===- InPlaceSum.h - tensor-parallel sums that need no buffer --*- C++ -*-===//
//
// A te.tp_all_reduce whose input is a GEMM's output that nothing else reads
// sums that buffer in place: its output is a view of its input. Then a
// caller's all-reduce (torch.distributed.all_reduce, which works in place)
// needs no copy of the input first, and the plan one buffer less.
// te-plan-memory, the plan writer and the plan-memory checker agree on which
// sums these are through the predicate here.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_DIALECTS_INPLACESUM_H
#define TEJIT_DIALECTS_INPLACESUM_H

#include "dialects/TEDialect.h"

namespace mlir::te {

/// Whether `op` is a te.tp_all_reduce that sums in place: its input is the
/// result of a GEMM (te.matmul, te.scaled_matmul or a fused "gemm") that
/// only the sum reads, and its output does not reach func.return (directly
/// or through reshapes: a returned value is the caller's buffer).
bool isInPlaceSum(Operation *op);

} // namespace mlir::te

#endif // TEJIT_DIALECTS_INPLACESUM_H
