//===- SplitWgrad.cpp - te-split-wgrad: wgrad GEMMs of their own ------===//
//
// Transformer Engine's delay_wgrad_compute: the backward of a layer computes
// its data and bias gradients, and the weight-gradient GEMMs wait until the
// caller asks for them (backward_dw). The GEMMs that serve only the
// gradients of weights marked `te.delay_wgrad`, and what only those GEMMs'
// results feed (main_grad's add, casts), move from `@f_backward` into
// `@f_backward_wgrad`. What they read crosses by the cheapest safe way:
// caller-owned tensors (forward arguments and saved results, the backward's
// gradient and main_grad arguments) are read again, views of them are
// recomputed, and everything else, in particular a meta slot the backward's
// scale update overwrites afterwards, becomes a `deferred.<k>` result of
// the backward.
//
//===----------------------------------------------------------------------===//
#include "compiler/passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace tejit {
#define GEN_PASS_DEF_TESPLITWGRAD
#include "compiler/passes/Passes.h.inc"
} // namespace tejit

using namespace mlir;
using namespace mlir::te;

namespace {

bool isGemm(Operation *op) {
  return isa<MatmulOp, ScaledMatmulOp, GroupedMatmulOp, GroupedScaledMatmulOp>(
      op);
}

/// The arguments of `function` that some result of it overwrites
/// (`te.updates_arg`): their contents change when the function ends.
llvm::SmallDenseSet<unsigned> updatedArguments(func::FuncOp function) {
  llvm::SmallDenseSet<unsigned> updated;
  for (unsigned i = 0; i < function.getNumResults(); ++i)
    if (auto arg =
            function.getResultAttrOfType<IntegerAttr>(i, "te.updates_arg"))
      updated.insert(arg.getInt());
  return updated;
}

/// Splits one backward function.
class WgradSplitter {
public:
  WgradSplitter(func::FuncOp forward, func::FuncOp backward)
      : forward(forward), backward(backward), builder(backward.getContext()) {}

  /// Returns the new function, or null when nothing moves.
  func::FuncOp run();

private:
  /// The backward results that are gradients of `te.delay_wgrad` weights.
  llvm::SmallDenseSet<unsigned> delayedResults();
  /// The ops to move, in program order.
  SmallVector<Operation *> opsToMove(const llvm::SmallDenseSet<unsigned> &);
  /// Whether the wgrad function may read backward argument `arg` itself:
  /// a tensor in the caller's memory that stays as it is until the wgrad
  /// runs (forward arguments and results other than FP8 state, the
  /// output gradients, main_grad).
  bool readableLater(BlockArgument arg);
  /// The wgrad function's copy of `value`, a backward value that a moved op
  /// reads.
  Value crossed(Value value);
  Value addArgument(Type type, ArrayRef<NamedAttribute> attrs);

  func::FuncOp forward, backward, wgrad;
  OpBuilder builder;
  IRMapping mapping;
  SmallVector<DictionaryAttr> wgradArgAttrs;
  /// Backward values handed over as `deferred.<k>` results, which follow
  /// the backward's other results from `firstDeferred` on.
  SmallVector<Value> deferred;
  unsigned firstDeferred = 0;
};

llvm::SmallDenseSet<unsigned> WgradSplitter::delayedResults() {
  llvm::SmallDenseSet<unsigned> results;
  for (unsigned i = 0; i < backward.getNumResults(); ++i)
    if (auto of = backward.getResultAttrOfType<IntegerAttr>(i, "te.grad_of"))
      if (forward.getArgAttr(of.getInt(), "te.delay_wgrad"))
        results.insert(i);
  return results;
}

SmallVector<Operation *>
WgradSplitter::opsToMove(const llvm::SmallDenseSet<unsigned> &delayed) {
  Block &body = backward.front();
  Operation *returnOp = body.getTerminator();
  // Ops whose every result serves delayed weight gradients only, found
  // from the return backwards (users follow their operands in one block).
  llvm::SmallPtrSet<Operation *, 16> servesWgrad;
  for (Operation &op : llvm::reverse(body.without_terminator())) {
    if (op.getNumResults() == 0 || op.use_empty())
      continue;
    bool only = llvm::all_of(op.getUses(), [&](OpOperand &use) {
      if (use.getOwner() == returnOp)
        return delayed.contains(use.getOperandNumber());
      return servesWgrad.contains(use.getOwner());
    });
    if (only)
      servesWgrad.insert(&op);
  }
  // Of those, the GEMMs (which are wgrad GEMMs: a dgrad GEMM serves a data
  // gradient) and what reads their results; the casts that make the GEMMs'
  // operands stay, as Transformer Engine keeps the quantized grad_output.
  SmallVector<Operation *> moved;
  llvm::SmallPtrSet<Operation *, 16> movedSet;
  for (Operation &op : body.without_terminator()) {
    if (!servesWgrad.contains(&op))
      continue;
    bool readsMoved = llvm::any_of(op.getOperands(), [&](Value operand) {
      return movedSet.contains(operand.getDefiningOp());
    });
    if (isGemm(&op) || readsMoved) {
      moved.push_back(&op);
      movedSet.insert(&op);
    }
  }
  return moved;
}

bool WgradSplitter::readableLater(BlockArgument arg) {
  unsigned number = arg.getArgNumber();
  if (updatedArguments(backward).contains(number))
    return false;
  // Forward tensors that a later forward (queued before this wgrad)
  // overwrites: the FP8 state the forward updates.
  llvm::SmallDenseSet<unsigned> forwardUpdated = updatedArguments(forward);
  if (auto index =
          backward.getArgAttrOfType<IntegerAttr>(number, "te.forward_arg"))
    return !forwardUpdated.contains(index.getInt());
  if (auto index =
          backward.getArgAttrOfType<IntegerAttr>(number, "te.forward_result"))
    return !forward.getResultAttr(index.getInt(), "te.updates_arg");
  auto name = backward.getArgAttrOfType<StringAttr>(number, "te.name");
  return name && (name.getValue().starts_with("grad.") ||
                  name.getValue().starts_with("main_grad."));
}

Value WgradSplitter::addArgument(Type type, ArrayRef<NamedAttribute> attrs) {
  wgradArgAttrs.push_back(builder.getDictionaryAttr(attrs));
  return wgrad.front().addArgument(type, backward.getLoc());
}

Value WgradSplitter::crossed(Value value) {
  if (Value copy = mapping.lookupOrNull(value))
    return copy;
  Value copy;
  auto arg = dyn_cast<BlockArgument>(value);
  Operation *view = value.getDefiningOp();
  bool isView = isa_and_nonnull<ReshapeOp, SliceOp>(view);
  if (arg && readableLater(arg)) {
    // Read directly: the same interface attributes (te.forward_arg,
    // te.forward_result), or the backward's own argument by index.
    SmallVector<NamedAttribute> attrs(
        backward.getArgAttrDict(arg.getArgNumber()).getValue());
    if (!backward.getArgAttr(arg.getArgNumber(), "te.forward_arg") &&
        !backward.getArgAttr(arg.getArgNumber(), "te.forward_result"))
      attrs.push_back(builder.getNamedAttr(
          "te.backward_arg", builder.getI64IntegerAttr(arg.getArgNumber())));
    copy = addArgument(value.getType(), attrs);
  } else if (isView && isa<BlockArgument>(view->getOperand(0)) &&
             readableLater(cast<BlockArgument>(view->getOperand(0)))) {
    // A view of a tensor read directly costs nothing to take again.
    IRMapping operands;
    operands.map(view->getOperand(0), crossed(view->getOperand(0)));
    copy = builder.clone(*view, operands)->getResult(0);
  } else {
    // Anything else is handed over (a meta slot as it is before the
    // backward updates the meta vector, a cast the backward made).
    unsigned result = firstDeferred + deferred.size();
    deferred.push_back(value);
    copy = addArgument(
        value.getType(),
        {builder.getNamedAttr(
             "te.name",
             builder.getStringAttr("deferred." + Twine(deferred.size() - 1))),
         builder.getNamedAttr("te.backward_result",
                              builder.getI64IntegerAttr(result))});
  }
  mapping.map(value, copy);
  return copy;
}

func::FuncOp WgradSplitter::run() {
  llvm::SmallDenseSet<unsigned> delayed = delayedResults();
  if (delayed.empty())
    return nullptr;
  SmallVector<Operation *> moved = opsToMove(delayed);
  if (moved.empty())
    return nullptr;
  MLIRContext *context = backward.getContext();
  firstDeferred = backward.getNumResults() - delayed.size();
  builder.setInsertionPointAfter(backward);
  wgrad = builder.create<func::FuncOp>(backward.getLoc(),
                                       (backward.getName() + "_wgrad").str(),
                                       builder.getFunctionType({}, {}));
  wgrad->setAttr("te.wgrad_of", FlatSymbolRefAttr::get(backward.getNameAttr()));
  builder.setInsertionPointToStart(wgrad.addEntryBlock());

  // Arguments are added as the moved ops first read them; the mapping
  // covers a moved op's results once it is cloned.
  for (Operation *op : moved) {
    for (Value operand : op->getOperands())
      if (!mapping.contains(operand))
        crossed(operand);
    builder.clone(*op, mapping);
  }
  auto returnOp = cast<func::ReturnOp>(backward.front().getTerminator());
  SmallVector<Value> wgradResults;
  SmallVector<DictionaryAttr> wgradResultAttrs;
  SmallVector<Value> kept;
  SmallVector<DictionaryAttr> keptAttrs;
  for (auto [index, value] : llvm::enumerate(returnOp.getOperands())) {
    DictionaryAttr attrs = backward.getResultAttrDict(index);
    if (delayed.contains(index)) {
      wgradResults.push_back(mapping.lookupOrDefault(value));
      wgradResultAttrs.push_back(attrs);
    } else {
      kept.push_back(value);
      keptAttrs.push_back(attrs);
    }
  }
  builder.create<func::ReturnOp>(backward.getLoc(), wgradResults);
  wgrad.setType(FunctionType::get(context, wgrad.front().getArgumentTypes(),
                                  ValueRange(wgradResults).getTypes()));
  wgrad.setAllArgAttrs(wgradArgAttrs);
  wgrad.setAllResultAttrs(wgradResultAttrs);

  // The backward drops the delayed gradients and returns the deferred
  // values after its other results.
  for (auto [k, value] : llvm::enumerate(deferred)) {
    kept.push_back(value);
    keptAttrs.push_back(builder.getDictionaryAttr(builder.getNamedAttr(
        "te.name", builder.getStringAttr("deferred." + Twine(k)))));
  }
  OpBuilder(returnOp).create<func::ReturnOp>(returnOp.getLoc(), kept);
  returnOp.erase();
  for (Operation *op : llvm::reverse(moved))
    op->erase();
  backward.setType(FunctionType::get(context, backward.getArgumentTypes(),
                                     ValueRange(kept).getTypes()));
  backward.setAllResultAttrs(keptAttrs);
  return wgrad;
}

struct SplitWgradPass : public tejit::impl::TESplitWgradBase<SplitWgradPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<std::pair<func::FuncOp, func::FuncOp>> pairs;
    for (auto backward : module.getOps<func::FuncOp>()) {
      auto of = backward->getAttrOfType<FlatSymbolRefAttr>("te.backward_of");
      if (!of)
        continue;
      auto forward = module.lookupSymbol<func::FuncOp>(of.getAttr());
      if (forward)
        pairs.push_back({forward, backward});
    }
    for (auto [forward, backward] : pairs)
      WgradSplitter(forward, backward).run();
  }
};
} // namespace
