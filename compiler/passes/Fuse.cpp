//===- Fuse.cpp - te-fuse: primitive ops into kernel regions
//---------------===//
//
// Patterns grow groups from an anchor op along its uses; a group becomes a
// te.fused region placed where its last op was. Each pattern claims ops, so
// that a later, lower-priority pattern does not take them again.
//
//===----------------------------------------------------------------------===//
#include "compiler/passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace tejit {
#define GEN_PASS_DEF_TEFUSE
#include "compiler/passes/Passes.h.inc"
} // namespace tejit

using namespace mlir;
using namespace mlir::te;

namespace {

/// The user of `value` of type OpT that reads it as operand `index`, if any.
template <typename OpT> OpT userOf(Value value, unsigned index = 0) {
  for (OpOperand &use : value.getUses())
    if (auto user = dyn_cast<OpT>(use.getOwner()))
      if (use.getOperandNumber() == index)
        return user;
  return nullptr;
}

bool isGelu(Activation activation) { return activation == Activation::gelu; }

class Fuser {
public:
  explicit Fuser(func::FuncOp function) : function(function) {}

  void run();

private:
  /// A group under construction, anchored at its first op.
  struct Group {
    SmallVector<Operation *> ops;
    StringRef kind;
  };

  /// Adds `op` to `group` if it is free and the group stays legal.
  bool tryAdd(Group &group, Operation *op);
  bool isLegal(ArrayRef<Operation *> ops);
  /// Keeps `group` when it has at least `minOps` ops (a fusion needs two; a
  /// grouped op is a kernel region of its own).
  void commit(Group &group, size_t minOps = 2);
  void materialize(const Group &group);

  /// Extends `group` with the FP8 cast of `value` and its transpose, or,
  /// failing that (current scaling), with the amax of `value`.
  void addCast(Group &group, Value value);

  void fuseGemm(Operation *gemm);
  void fuseGroupedWgradAccumulation(Operation *gemm);
  void fuseNorm(Operation *norm);
  void fuseNormBwdAdd(Operation *normBwd);
  void fuseDact(ActivationGradOp dact);
  void fuseBiasDropoutAdd(DropoutOp dropout);
  void fuseAct(ActivationOp act);
  void fuseCastTranspose(QuantizeOp quantize);
  void fuseBlockCasts(BlockQuantizeOp quantize);
  void fuseGroupedCasts(GroupedQuantizeOp quantize);
  void fuseGroupedBlockCasts(GroupedBlockQuantizeOp quantize);

  func::FuncOp function;
  DenseMap<Operation *, unsigned> position;
  DenseSet<Operation *> claimed;
  SmallVector<Group> groups;
};

bool Fuser::isLegal(ArrayRef<Operation *> ops) {
  DenseSet<Operation *> members(ops.begin(), ops.end());
  unsigned first = ~0u, last = 0;
  for (Operation *op : ops) {
    first = std::min(first, position.lookup(op));
    last = std::max(last, position.lookup(op));
  }
  // The region replaces the group at its last op: any op in between that
  // reads a value computed inside would then read it before it exists.
  for (Operation &op : function.front()) {
    unsigned at = position.lookup(&op);
    if (at <= first || at >= last || members.contains(&op))
      continue;
    for (Value operand : op.getOperands())
      if (Operation *def = operand.getDefiningOp();
          def && members.contains(def))
        return false;
  }
  return true;
}

bool Fuser::tryAdd(Group &group, Operation *op) {
  if (!op || claimed.contains(op) || llvm::is_contained(group.ops, op))
    return false;
  group.ops.push_back(op);
  if (isLegal(group.ops))
    return true;
  group.ops.pop_back();
  return false;
}

void Fuser::commit(Group &group, size_t minOps) {
  if (group.ops.size() < minOps)
    return;
  for (Operation *op : group.ops)
    claimed.insert(op);
  groups.push_back(group);
}

void Fuser::addCast(Group &group, Value value) {
  if (auto quantize = userOf<QuantizeOp>(value); tryAdd(group, quantize)) {
    Value fp8 = quantize.getOutput();
    tryAdd(group, userOf<TransposeOp>(fp8));
    return;
  }
  tryAdd(group, userOf<AmaxOp>(value));
}

void Fuser::fuseGroupedWgradAccumulation(Operation *gemm) {
  // GroupedLinear's wgrad under fuse_wgrad_accumulation: dW_g + main_grad_g
  // is cuBLASLt's C with beta = 1 in each group's GEMM (the runtime's
  // "accumulate"), instead of a float32 [G, N, K] product written, read back
  // and added by a kernel of its own. Only the contraction form (out
  // [G, M, N]): the rows form zeroes its padding rows, which an accumulated
  // output would have to keep.
  bool contraction = isa<GroupedMatmulOp>(gemm)
                         ? !cast<GroupedMatmulOp>(gemm).isRowsForm()
                         : !cast<GroupedScaledMatmulOp>(gemm).isRowsForm();
  Value product = gemm->getResult(0);
  if (!contraction || !product.hasOneUse())
    return;
  auto add = dyn_cast<AddOp>(*product.getUsers().begin());
  if (!add || add.getOutput().getType() != product.getType())
    return;
  Group group{{gemm}, "gemm"};
  tryAdd(group, add);
  commit(group);
}

void Fuser::fuseGemm(Operation *gemm) {
  Group group{{gemm}, "gemm"};
  // Block-scaled GEMMs (Float8BlockScaling) take no epilogue: the bias and
  // activation go to the kernels that follow (act_cast, bias_dropout_add).
  // Only a residual, which cuBLASLt reads as C with beta = 1 (how wgrad adds
  // into main_grad with fuse_wgrad_accumulation).
  if (auto scaled = dyn_cast<ScaledMatmulOp>(gemm);
      scaled && scaled.getAScaling() != 0) {
    Value product = gemm->getResult(0);
    if (product.hasOneUse())
      if (auto add = dyn_cast<AddOp>(*product.getUsers().begin()))
        tryAdd(group, add);
    commit(group);
    return;
  }
  Value value = gemm->getResult(0);
  // Backward: dGELU and the bias gradient are not taken as cuBLASLt's
  // DGELU_BGRAD epilogue: cuBLASLt 13.1 runs that epilogue as a separate
  // kernel after the GEMM, for FP8 and bf16 GEMMs alike (about 1 ms for
  // 8192 x 16384 on an H200). dact_dbias_cast does dGELU and the bias
  // gradient (and, under FP8, the cast and transpose the next GEMMs need)
  // in one pass instead, as TE's fused dgelu kernels do. The plan format
  // and the runtime still take the epilogue.
  //
  // Forward: bias, then GELU (its input stays available as aux), then an
  // FP8 output for FP8 GEMMs. Not GELU when that FP8 output is transposed
  // too (training: the next GEMM's weight gradient reads it): with
  // GELU_AUX_BIAS and an FP8 output, cuBLASLt 13.1 took 956 us for the
  // 8192 x 16384 x 4096 product on an H200 against 767 us with BIAS alone,
  // and the transpose needed a kernel of its own; act_cast then does GELU,
  // the cast and the transpose in one pass over the bias-added output,
  // which is the aux the backward reads anyway.
  if (auto bias = userOf<BiasAddOp>(value);
      bias && value.hasOneUse() && tryAdd(group, bias))
    value = bias.getOutput();
  auto act = userOf<ActivationOp>(value);
  if (act && isGelu(act.getActivation())) {
    auto quantize = userOf<QuantizeOp>(act.getOutput());
    bool transposed = quantize && userOf<TransposeOp>(quantize.getOutput());
    if (!(isa<ScaledMatmulOp>(gemm) && transposed) && tryAdd(group, act) &&
        isa<ScaledMatmulOp>(gemm) && quantize)
      tryAdd(group, quantize);
  } else if (value.hasOneUse()) {
    // A residual added to the (bias-added) product, its only use: cuBLASLt
    // reads it as C with beta = 1 and adds it in f32 before the single
    // rounding to the output type, instead of the product being written,
    // read back and added by a kernel of its own (a residual connection
    // without dropout: inference, Llama-style layers). Not for FP8
    // outputs, whose C would have another type.
    if (auto add = dyn_cast<AddOp>(*value.getUsers().begin());
        add && !isa<Float8E4M3FNType, Float8E5M2Type>(
                   getElementTypeOrSelf(value.getType())))
      tryAdd(group, add);
  }
  commit(group);
}

void Fuser::fuseNorm(Operation *norm) {
  Group group{{norm}, "norm_cast"};
  addCast(group, norm->getResult(0));
  commit(group);
}

void Fuser::fuseNormBwdAdd(Operation *normBwd) {
  // The residual connection's gradient added to dx: in the dx kernel, where
  // dx is still a float, instead of written, read back and added by a
  // kernel of its own. Only when the sum is all dx is for.
  Group group{{normBwd}, "norm_bwd_add"};
  Value dx = normBwd->getResult(0);
  if (dx.hasOneUse())
    if (auto add = dyn_cast<AddOp>(*dx.getUsers().begin()))
      tryAdd(group, add);
  commit(group);
}

void Fuser::fuseDact(ActivationGradOp dact) {
  Group group{{dact.getOperation()}, "dact_dbias_cast"};
  tryAdd(group, userOf<BiasGradOp>(dact.getOutput()));
  addCast(group, dact.getOutput());
  commit(group);
}

void Fuser::fuseBiasDropoutAdd(DropoutOp dropout) {
  Group group{{dropout.getOperation()}, "bias_dropout_add"};
  if (auto bias = dropout.getInput().getDefiningOp<BiasAddOp>();
      bias && bias.getOutput().hasOneUse())
    tryAdd(group, bias);
  if (dropout.getOutput().hasOneUse())
    tryAdd(group, *dropout.getOutput().getUsers().begin());
  // Only the add makes this pattern; bias + dropout alone is act_cast's.
  if (llvm::any_of(group.ops, [](Operation *op) { return isa<AddOp>(op); }))
    commit(group);
}

/// Whether `value` is the product of a block-scaled GEMM, which takes no
/// bias epilogue.
static bool isBlockScaledProduct(Value value) {
  auto scaled = value.getDefiningOp<ScaledMatmulOp>();
  return scaled && scaled.getAScaling() != 0;
}

void Fuser::fuseAct(ActivationOp act) {
  Group group{{act.getOperation()}, "act_cast"};
  // The bias is added here when no GEMM epilogue took it; after a
  // block-scaled GEMM also when the backward reads the biased value (the
  // activation's input), which the kernel then writes too.
  if (auto bias = act.getInput().getDefiningOp<BiasAddOp>();
      bias &&
      (bias.getOutput().hasOneUse() || isBlockScaledProduct(bias.getInput())))
    tryAdd(group, bias);
  addCast(group, act.getOutput());
  commit(group);
}

void Fuser::fuseCastTranspose(QuantizeOp quantize) {
  Group group{{quantize.getOperation()}, "cast_transpose"};
  tryAdd(group, userOf<TransposeOp>(quantize.getOutput()));
  // The bias gradient of the same tensor reads it once more: fold it in
  // (TE's cast_transpose_bgrad).
  tryAdd(group, userOf<BiasGradOp>(quantize.getInput()));
  // Backward of dropout (the forward's mask drawn again, applied to the
  // gradient) and of the residual add before it: computed on the fly
  // instead of written out and read back.
  if (auto dropout = quantize.getInput().getDefiningOp<DropoutOp>();
      dropout && tryAdd(group, dropout))
    tryAdd(group, dropout.getInput().getDefiningOp<AddOp>());
  // FP8 attention's output handed back to bf16 (te.dequantize) and cast
  // again for the projection GEMM: one pass from FP8 to FP8. The cast reads
  // the float product, not its bf16 rounding, as in every fused group.
  tryAdd(group, quantize.getInput().getDefiningOp<DequantizeOp>());
  commit(group);
}

void Fuser::fuseBlockCasts(BlockQuantizeOp quantize) {
  // Float8BlockScaling casts a tensor twice, for the forward GEMM and
  // transposed for the backward's (docs/block-scaling.md): one kernel reads
  // it once for both.
  Group group{{quantize.getOperation()}, "block_quantize"};
  for (Operation *user : quantize.getInput().getUsers())
    if (isa<BlockQuantizeOp>(user))
      tryAdd(group, user);
  commit(group);
}

void Fuser::fuseGroupedCasts(GroupedQuantizeOp quantize) {
  // GroupedLinear (docs/grouped-linear.md): a tensor's per-group cast and
  // its transposed cast (the K-major copy a backward GEMM reads) with the
  // same scales and segments are one kernel that reads it once; every other
  // grouped cast is a kernel region of its own.
  Group group{{quantize.getOperation()}, "grouped_quantize"};
  for (Operation *user : quantize.getInput().getUsers())
    if (auto other = dyn_cast<GroupedQuantizeOp>(user);
        other && other != quantize &&
        other.getTranspose() != quantize.getTranspose() &&
        other.getScale() == quantize.getScale() &&
        other.getMSplits() == quantize.getMSplits() &&
        getElementTypeOrSelf(other.getOutput().getType()) ==
            getElementTypeOrSelf(quantize.getOutput().getType())) {
      tryAdd(group, other);
      break;
    }
  commit(group, /*minOps=*/1);
}

void Fuser::fuseGroupedBlockCasts(GroupedBlockQuantizeOp quantize) {
  // GroupedLinear under Float8BlockScaling: the block casts of one tensor
  // in the same groups (row-wise for the forward GEMM, transposed for the
  // backward's) are one kernel that reads it once; a lone cast is a kernel
  // region of its own.
  Group group{{quantize.getOperation()}, "grouped_block_quantize"};
  for (Operation *user : quantize.getInput().getUsers())
    if (auto other = dyn_cast<GroupedBlockQuantizeOp>(user);
        other && other.getMSplits() == quantize.getMSplits())
      tryAdd(group, other);
  commit(group, /*minOps=*/1);
}

void Fuser::materialize(const Group &group) {
  SmallVector<Operation *> ops(group.ops);
  llvm::sort(ops, [&](Operation *a, Operation *b) {
    return position.lookup(a) < position.lookup(b);
  });
  DenseSet<Operation *> members(ops.begin(), ops.end());
  llvm::SetVector<Value> inputs;
  SmallVector<Value> outputs;
  for (Operation *op : ops) {
    for (Value operand : op->getOperands())
      if (!members.contains(operand.getDefiningOp()))
        inputs.insert(operand);
    for (Value result : op->getResults())
      if (llvm::any_of(result.getUsers(), [&](Operation *user) {
            return !members.contains(user);
          }))
        outputs.push_back(result);
  }
  OpBuilder builder(ops.back());
  auto fused = builder.create<FusedOp>(
      ops.back()->getLoc(), ValueRange(outputs).getTypes(),
      inputs.getArrayRef(), builder.getStringAttr(group.kind));
  Block *body = builder.createBlock(&fused.getBody());
  IRMapping mapping;
  for (Value input : inputs)
    mapping.map(input, body->addArgument(input.getType(), input.getLoc()));
  for (Operation *op : ops)
    builder.clone(*op, mapping);
  SmallVector<Value> yielded;
  for (Value output : outputs)
    yielded.push_back(mapping.lookup(output));
  builder.create<YieldOp>(fused.getLoc(), yielded);
  for (auto [output, result] : llvm::zip(outputs, fused.getResults()))
    output.replaceUsesWithIf(result, [&](OpOperand &use) {
      return !members.contains(use.getOwner());
    });
  for (Operation *op : llvm::reverse(ops))
    op->erase();
}

/// Reshapes the FP8 input of each te.dequantize that only a te.reshape
/// reads instead of its output (element-wise, the two commute; reshapes
/// move no data): the dequantization then reads what its consumer does,
/// as FP8 attention's 4-D output does through the [tokens, hidden] reshape
/// before the projection GEMM's cast, and fuses with it.
static void reshapeBeforeDequantize(func::FuncOp function) {
  SmallVector<ReshapeOp> reshapes;
  function.walk([&](ReshapeOp reshape) {
    if (auto dequantize = reshape.getInput().getDefiningOp<DequantizeOp>();
        dequantize && dequantize.getOutput().hasOneUse())
      reshapes.push_back(reshape);
  });
  for (ReshapeOp reshape : reshapes) {
    auto dequantize = reshape.getInput().getDefiningOp<DequantizeOp>();
    OpBuilder builder(reshape);
    auto outputType = cast<RankedTensorType>(reshape.getOutput().getType());
    Value fp8 = builder.create<ReshapeOp>(
        reshape.getLoc(),
        outputType.clone(getElementTypeOrSelf(dequantize.getInput())),
        dequantize.getInput());
    Value output = builder.create<DequantizeOp>(dequantize.getLoc(), outputType,
                                                fp8, dequantize.getScaleInv());
    reshape.getOutput().replaceAllUsesWith(output);
    reshape.erase();
    dequantize.erase();
  }
}

void Fuser::run() {
  // te.tp_copy only told te-autodiff where to sum a gradient over the ranks.
  function.walk([](TpCopyOp copy) {
    copy.getOutput().replaceAllUsesWith(copy.getInput());
    copy.erase();
  });
  reshapeBeforeDequantize(function);
  unsigned index = 0;
  for (Operation &op : function.front())
    position[&op] = index++;
  SmallVector<Operation *> ops;
  for (Operation &op : function.front())
    ops.push_back(&op);
  auto each = [&](auto fuse) {
    for (Operation *op : ops)
      if (!claimed.contains(op))
        fuse(op);
  };
  each([&](Operation *op) {
    if (isa<MatmulOp, ScaledMatmulOp>(op))
      fuseGemm(op);
    else if (isa<GroupedMatmulOp, GroupedScaledMatmulOp>(op))
      fuseGroupedWgradAccumulation(op);
  });
  each([&](Operation *op) {
    if (isa<LayerNormFwdOp, RMSNormFwdOp>(op))
      fuseNorm(op);
  });
  each([&](Operation *op) {
    if (isa<LayerNormBwdOp, RMSNormBwdOp>(op))
      fuseNormBwdAdd(op);
  });
  each([&](Operation *op) {
    if (auto dact = dyn_cast<ActivationGradOp>(op))
      fuseDact(dact);
  });
  each([&](Operation *op) {
    if (auto dropout = dyn_cast<DropoutOp>(op))
      fuseBiasDropoutAdd(dropout);
  });
  each([&](Operation *op) {
    if (auto act = dyn_cast<ActivationOp>(op))
      fuseAct(act);
  });
  each([&](Operation *op) {
    if (auto quantize = dyn_cast<QuantizeOp>(op))
      fuseCastTranspose(quantize);
  });
  each([&](Operation *op) {
    if (auto quantize = dyn_cast<BlockQuantizeOp>(op))
      fuseBlockCasts(quantize);
  });
  each([&](Operation *op) {
    if (auto quantize = dyn_cast<GroupedQuantizeOp>(op))
      fuseGroupedCasts(quantize);
  });
  each([&](Operation *op) {
    if (auto quantize = dyn_cast<GroupedBlockQuantizeOp>(op))
      fuseGroupedBlockCasts(quantize);
  });
  // The other grouped kernels: each is a region of its own.
  each([&](Operation *op) {
    if (isa<GroupedAmaxOp, GroupedBiasGradOp>(op)) {
      Group group{
          {op}, isa<GroupedAmaxOp>(op) ? "grouped_amax" : "grouped_bias_grad"};
      commit(group, /*minOps=*/1);
    }
  });
  for (const Group &group : groups)
    materialize(group);
  // A tensor-parallel collective (sum, or sequence parallelism's gather
  // and reduce-scatter) starts as soon as its input is ready: the runtime
  // runs it beside the ops that follow until one reads its output (a dgrad
  // GEMM's sum or reduce-scatter beside the wgrad GEMM, as Transformer
  // Engine overlaps them).
  function.walk([](Operation *op) {
    if (!isa<TpAllReduceOp, TpAllGatherOp, TpReduceScatterOp>(op))
      return;
    if (Operation *producer = op->getOperand(0).getDefiningOp())
      op->moveAfter(producer);
  });
}

struct FusePass : public tejit::impl::TEFuseBase<FusePass> {
  void runOnOperation() override { Fuser(getOperation()).run(); }
};
} // namespace
