//===- Autodiff.cpp - te-autodiff: backward functions of forward ones
//------===//
//
// Reverse-mode differentiation over the primitive ops of one block: ops are
// visited last to first, and each adds its operands' gradient contributions.
// Forward values the backward pass reads are made available through
// `Differentiator::available`, which decides between forward argument,
// recomputed view, and saved result; context parallelism's whole-sequence k
// and v are gathered again (`Differentiator::regathered`).
//
//===----------------------------------------------------------------------===//
#include "compiler/passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/TypeSwitch.h"

namespace tejit {
#define GEN_PASS_DEF_TEAUTODIFF
#include "compiler/passes/Passes.h.inc"
} // namespace tejit

using namespace mlir;
using namespace mlir::te;

namespace {

RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

bool isFloatTensor(Value value) {
  return isa<FloatType>(tensorType(value).getElementType());
}

/// Builds `@f_backward` while walking `@f` backwards.
class Differentiator {
public:
  Differentiator(func::FuncOp forward, func::FuncOp backward)
      : forward(forward), backward(backward),
        builder(OpBuilder::atBlockEnd(&backward.front())) {}

  LogicalResult run();

private:
  /// The backward-side copy of forward value `value`.
  Value available(Value value);
  /// Hands `value` from the forward to the backward as a saved result.
  Value save(Value value);
  /// Whole-sequence k or v read by te.attention_bwd with cp_ranks > 1: a new
  /// te.cp_all_gather of the forward gather's input, so that the forward
  /// saves the rank's tokens only (as Transformer Engine's
  /// AttnFuncWithCPAndKVAllGather does).
  Value regathered(CpAllGatherOp gather);
  Value addArgument(Type type, NamedAttribute attr);
  /// The main_grad element type of `value` when it is a forward argument
  /// marked `te.main_grad = <type>` (a GEMM weight under Transformer
  /// Engine's fuse_wgrad_accumulation), else null.
  Type mainGradType(Value value);
  /// The forward result that is `value` or a reshape of it, and its index;
  /// a null value if there is none.
  std::pair<int64_t, Value> forwardResultOf(Value value);

  void addGrad(Value value, Value grad);
  /// The complete gradient of `value`, or null if nothing flows into it.
  Value takeGrad(Value value);

  LogicalResult differentiate(Operation *op);
  void matmulGrads(MatmulOp op, Value grad);
  LogicalResult groupedMatmulGrads(GroupedMatmulOp op, Value grad);
  void attentionGrads(AttentionOp op, Value grad);

  template <typename OpT, typename... Args> OpT create(Args &&...args) {
    return builder.create<OpT>(forwardLoc, std::forward<Args>(args)...);
  }

  func::FuncOp forward, backward;
  OpBuilder builder;
  Location forwardLoc = UnknownLoc::get(forward.getContext());
  DenseMap<Value, Value> grads;
  /// Gradients of slices, by the sliced value: (offset, gradient).
  DenseMap<Value, SmallVector<std::pair<int64_t, Value>>> sliceGrads;
  DenseMap<Value, Value> mapped;
  SmallVector<Value> saved;
  SmallVector<DictionaryAttr> backwardArgAttrs;
};

Value Differentiator::addArgument(Type type, NamedAttribute attr) {
  backwardArgAttrs.push_back(DictionaryAttr::get(type.getContext(), {attr}));
  return backward.front().addArgument(type, forward.getLoc());
}

Type Differentiator::mainGradType(Value value) {
  auto arg = dyn_cast<BlockArgument>(value);
  if (!arg || arg.getOwner() != &forward.front())
    return Type();
  auto attr =
      forward.getArgAttrOfType<TypeAttr>(arg.getArgNumber(), "te.main_grad");
  return attr ? attr.getValue() : Type();
}

Value Differentiator::available(Value value) {
  if (Value copy = mapped.lookup(value))
    return copy;
  Value copy;
  auto arg = dyn_cast<BlockArgument>(value);
  // The dropout state is saved, not re-read: the runtime moves it on at
  // every forward, and a backward must regenerate its own forward's masks
  // even when other forwards ran in between.
  bool isRngState = false;
  if (ArrayAttr argAttrs = forward.getArgAttrsAttr();
      arg && argAttrs && arg.getArgNumber() < argAttrs.size())
    if (auto dict = dyn_cast<DictionaryAttr>(argAttrs[arg.getArgNumber()]))
      if (auto name = dict.getAs<StringAttr>("te.name"))
        isRngState = name.getValue() == "rng_state";
  if (arg && !isRngState) {
    copy = addArgument(
        value.getType(),
        builder.getNamedAttr("te.forward_arg",
                             builder.getI64IntegerAttr(arg.getArgNumber())));
  } else if (isa_and_nonnull<ReshapeOp, SliceOp, TransposeOp>(
                 value.getDefiningOp())) {
    // Views cost nothing to recompute; saving them would cost memory.
    IRMapping operands;
    Operation *view = value.getDefiningOp();
    operands.map(view->getOperand(0), available(view->getOperand(0)));
    copy = builder.clone(*view, operands)->getResult(0);
  } else if (auto [result, returned] = forwardResultOf(value);
             returned && value.getDefiningOp<AttentionOp>()) {
    // Attention's output when the forward returns it anyway, as it is or
    // reshaped (DotProductAttention alone): the backward reads that result
    // rather than a saved copy of it, which cost a device copy and its
    // memory. Only attention's: a GEMM operand must stay a saved value, which
    // te-place-scaling swaps for the FP8 copy the forward GEMM made.
    copy = addArgument(returned.getType(),
                       builder.getNamedAttr("te.forward_result",
                                            builder.getI64IntegerAttr(result)));
    if (returned != value)
      copy = create<ReshapeOp>(value.getType(), copy);
  } else {
    return save(value);
  }
  mapped[value] = copy;
  return copy;
}

Value Differentiator::save(Value value) {
  int64_t index = forward.getNumResults() + saved.size();
  saved.push_back(value);
  Value copy = addArgument(
      value.getType(), builder.getNamedAttr("te.forward_result",
                                            builder.getI64IntegerAttr(index)));
  mapped[value] = copy;
  return copy;
}

Value Differentiator::regathered(CpAllGatherOp gather) {
  if (Value copy = mapped.lookup(gather.getResult()))
    return copy;
  // The gather's input as the backward gets it. A view is recomputed only
  // when what it views is at hand anyway (a forward argument, or a value
  // already saved, such as the fused QKV output that q, made available
  // before k and v, is a view of without rotary); otherwise the view itself is
  // saved: recomputing v's column slice would save the whole fused QKV output.
  Value input = gather.getInput();
  Value root = input;
  while (isa_and_nonnull<ReshapeOp, SliceOp, TransposeOp>(root.getDefiningOp()))
    root = root.getDefiningOp()->getOperand(0);
  Value local = mapped.lookup(input);
  if (!local)
    local = isa<BlockArgument>(root) || mapped.count(root) ? available(input)
                                                           : save(input);
  Value copy =
      create<CpAllGatherOp>(gather.getType(), local, gather->getAttrs())
          .getResult();
  mapped[gather.getResult()] = copy;
  return copy;
}

std::pair<int64_t, Value> Differentiator::forwardResultOf(Value value) {
  auto returnOp = cast<func::ReturnOp>(forward.front().getTerminator());
  for (auto [index, operand] : llvm::enumerate(returnOp.getOperands())) {
    auto reshape = operand.getDefiningOp<ReshapeOp>();
    if (operand == value || (reshape && reshape->getOperand(0) == value))
      return {int64_t(index), operand};
  }
  return {-1, Value()};
}

void Differentiator::addGrad(Value value, Value grad) {
  if (!grad || !isFloatTensor(value))
    return;
  Value &slot = grads[value];
  slot = slot ? create<AddOp>(slot.getType(), slot, grad).getResult() : grad;
}

Value Differentiator::takeGrad(Value value) {
  Value grad = grads.lookup(value);
  auto slices = sliceGrads.find(value);
  if (slices == sliceGrads.end())
    return grad;
  // Slices of a fused projection (q, k, v) cover it: concatenate their
  // gradients in offset order. Gaps would need zeros, which no decomposition
  // produces, so they are an error caught by the verifier of te.concat.
  SmallVector<std::pair<int64_t, Value>> parts = slices->second;
  llvm::sort(parts, llvm::less_first());
  SmallVector<Value> pieces;
  for (auto &part : parts)
    pieces.push_back(part.second);
  Value joined = pieces.size() == 1
                     ? pieces.front()
                     : create<ConcatOp>(value.getType(), pieces).getResult();
  return grad ? create<AddOp>(grad.getType(), grad, joined).getResult()
              : joined;
}

void Differentiator::matmulGrads(MatmulOp op, Value grad) {
  // C = op(A) op(B): dop(A) = dC op(B)^T, dop(B) = op(A)^T dC, transposed
  // back when the operand itself was transposed.
  bool ta = op.getTransposeA(), tb = op.getTransposeB();
  Value a = op.getA(), b = op.getB();
  // The input's gradient is the dgrad GEMM, the weight's the wgrad GEMM;
  // both inherit the forward GEMM's recipe.
  auto matmul = [&](Value lhs, Value rhs, bool tl, bool tr, Type type,
                    GemmRole role) {
    UnitAttr unit = builder.getUnitAttr();
    return create<MatmulOp>(type, lhs, rhs, tl ? unit : nullptr,
                            tr ? unit : nullptr, op.getFp8RecipeAttr(),
                            GemmRoleAttr::get(op.getContext(), role))
        .getResult();
  };
  if (isFloatTensor(a))
    addGrad(a, ta ? matmul(available(b), grad, tb, true, a.getType(),
                           GemmRole::dgrad)
                  : matmul(grad, available(b), false, !tb, a.getType(),
                           GemmRole::dgrad));
  // A weight whose gradient accumulates into main_grad gets its wgrad GEMM
  // in main_grad's type (run() adds main_grad, and te-fuse makes that add
  // the GEMM's C, so that the sum is taken before the one rounding).
  Type bGradType = b.getType();
  if (Type mainGrad = mainGradType(b))
    bGradType = tensorType(b).clone(mainGrad);
  if (isFloatTensor(b))
    addGrad(
        b, tb ? matmul(grad, available(a), true, ta, bGradType, GemmRole::wgrad)
              : matmul(available(a), grad, !ta, false, bGradType,
                       GemmRole::wgrad));
}

LogicalResult Differentiator::groupedMatmulGrads(GroupedMatmulOp op,
                                                 Value grad) {
  // GroupedLinear (docs/grouped-linear.md): per segment g, C_g = A_g op(B_g)
  // (+ bias_g), so dA_g = dC_g op(B_g)^T (the dgrad GEMM in the rows form
  // again, B's transpose flipped) and dB_g = A_g^T dC_g, or its transpose
  // when B was read transposed (the wgrad GEMM in the contraction form).
  // m_splits, an integer input, has no gradient; the backward reads it as
  // the forward's argument.
  if (!op.isRowsForm())
    return op.emitOpError()
           << "in the contraction form (a wgrad GEMM) cannot be "
              "differentiated by te-autodiff";
  Value a = op.getA(), b = op.getB();
  bool tb = op.getTransposeB();
  Value mSplits = available(op.getMSplits());
  UnitAttr unit = builder.getUnitAttr();
  auto role = [&](GemmRole value) {
    return GemmRoleAttr::get(op.getContext(), value);
  };
  if (isFloatTensor(a))
    addGrad(a, create<GroupedMatmulOp>(
                   a.getType(), grad, available(b), mSplits, /*bias=*/Value(),
                   /*transpose_a=*/nullptr, tb ? nullptr : unit,
                   op.getFp8RecipeAttr(), role(GemmRole::dgrad))
                   .getResult());
  Type bGradType = b.getType();
  if (Type mainGrad = mainGradType(b))
    bGradType = tensorType(b).clone(mainGrad);
  if (isFloatTensor(b))
    addGrad(b,
            create<GroupedMatmulOp>(
                bGradType, tb ? grad : available(a), tb ? available(a) : grad,
                mSplits, /*bias=*/Value(), unit, /*transpose_b=*/nullptr,
                op.getFp8RecipeAttr(), role(GemmRole::wgrad))
                .getResult());
  if (Value bias = op.getBias())
    addGrad(
        bias,
        create<GroupedBiasGradOp>(bias.getType(), grad, mSplits).getResult());
  return success();
}

void Differentiator::attentionGrads(AttentionOp op, Value grad) {
  // The optional operands (mask, query mask, RNG state, cu_seqlens, bias,
  // ALiBi slopes) follow the six fixed ones in te.attention's order, which
  // te.attention_bwd shares.
  SmallVector<Value> optionals;
  SmallVector<int32_t> segments(6, 1);
  for (Value optional :
       {op.getAttentionMask(), op.getQueryMask(), op.getRngState(),
        op.getCuSeqlensQ(), op.getCuSeqlensKv(), op.getBias(),
        op.getAlibiSlopes()}) {
    if (optional)
      optionals.push_back(available(optional));
    segments.push_back(optional ? 1 : 0);
  }
  // Under context parallelism k and v are the whole sequence, gathered from
  // the ranks: the backward gathers them again rather than have the forward
  // save them.
  auto keyOrValue = [&](Value value) {
    if (op.getCpRanks() > 1)
      if (auto gather = value.getDefiningOp<CpAllGatherOp>())
        return regathered(gather);
    return available(value);
  };
  SmallVector<Value> operands = {grad,
                                 available(op.getQuery()),
                                 keyOrValue(op.getKey()),
                                 keyOrValue(op.getValue()),
                                 available(op.getOutput()),
                                 available(op.getSoftmaxLse())};
  operands.append(optionals);
  NamedAttrList attrs(op->getAttrDictionary());
  attrs.set("operandSegmentSizes", builder.getDenseI32ArrayAttr(segments));
  SmallVector<Type> types = {op.getQuery().getType(), op.getKey().getType(),
                             op.getValue().getType()};
  // With bias_grad, a fourth result: the bias's gradient.
  if (op.getBiasGrad())
    types.push_back(op.getBias().getType());
  auto bwd = create<AttentionBwdOp>(types, operands, attrs.getAttrs());
  addGrad(op.getQuery(), bwd.getQueryGrad());
  addGrad(op.getKey(), bwd.getKeyGrad());
  addGrad(op.getValue(), bwd.getValueGrad());
  if (Value dbias = bwd.getDbias())
    addGrad(op.getBias(), dbias);
}

LogicalResult Differentiator::differentiate(Operation *op) {
  forwardLoc = op->getLoc();
  SmallVector<Value> resultGrads;
  for (Value result : op->getResults())
    resultGrads.push_back(takeGrad(result));
  if (llvm::all_of(resultGrads, [](Value grad) { return !grad; }))
    return success();
  Value grad = resultGrads.front();
  return TypeSwitch<Operation *, LogicalResult>(op)
      .Case([&](ReshapeOp op) {
        addGrad(op.getInput(),
                create<ReshapeOp>(op.getInput().getType(), grad));
        return success();
      })
      .Case([&](TransposeOp op) {
        addGrad(op.getInput(),
                create<TransposeOp>(op.getInput().getType(), grad));
        return success();
      })
      .Case([&](SliceOp op) {
        sliceGrads[op.getInput()].push_back(
            {op.getOffsetAttr().getInt(), grad});
        return success();
      })
      .Case([&](ConcatOp op) {
        int64_t offset = 0;
        for (Value input : op.getInputs()) {
          addGrad(input, create<SliceOp>(input.getType(), grad,
                                         builder.getI64IntegerAttr(offset)));
          offset += tensorType(input).getShape().back();
        }
        return success();
      })
      .Case([&](AddOp op) {
        addGrad(op.getLhs(), grad);
        addGrad(op.getRhs(), grad);
        return success();
      })
      .Case([&](TpCopyOp op) {
        // Each rank's slice of the output features contributes to the
        // input's gradient.
        addGrad(op.getInput(),
                create<TpAllReduceOp>(grad.getType(), grad, op.getRanksAttr()));
        return success();
      })
      .Case([&](TpAllReduceOp op) {
        // Every rank holds the whole sum, and its gradient.
        addGrad(op.getInput(), grad);
        return success();
      })
      .Case([&](TpAllGatherOp op) {
        // Each rank's slice of the whole tensor gets the sum of the ranks'
        // gradients of its chunk.
        addGrad(op.getInput(),
                create<TpReduceScatterOp>(op.getInput().getType(), grad,
                                          op.getRanksAttr()));
        return success();
      })
      .Case([&](TpReduceScatterOp op) {
        // Every rank's partial sum reaches every chunk of the output.
        addGrad(op.getInput(), create<TpAllGatherOp>(op.getInput().getType(),
                                                     grad, op.getRanksAttr()));
        return success();
      })
      .Case([&](CpAllGatherOp op) {
        // Every rank's queries read every key: the ranks' gradients of the
        // whole sequence add up, and each keeps its own tokens.
        addGrad(op.getInput(),
                create<CpReduceScatterOp>(op.getInput().getType(), grad,
                                          op->getAttrs()));
        return success();
      })
      .Case([&](CpReduceScatterOp op) {
        addGrad(op.getInput(), create<CpAllGatherOp>(op.getInput().getType(),
                                                     grad, op->getAttrs()));
        return success();
      })
      .Case([&](CpAllToAllOp op) {
        // A permutation of the ranks' elements: its gradient is the
        // inverse permutation, the other direction (the types tell).
        addGrad(op.getInput(), create<CpAllToAllOp>(op.getInput().getType(),
                                                    grad, op->getAttrs()));
        return success();
      })
      .Case([&](BiasAddOp op) {
        addGrad(op.getInput(), grad);
        addGrad(op.getBias(), create<BiasGradOp>(op.getBias().getType(), grad));
        return success();
      })
      .Case([&](ActivationOp op) {
        // The activation and its parameters: te.dact's attributes are
        // te.act's.
        addGrad(op.getInput(), create<ActivationGradOp>(
                                   TypeRange{op.getInput().getType()},
                                   ValueRange{grad, available(op.getInput())},
                                   op->getAttrs()));
        return success();
      })
      .Case([&](DropoutOp op) {
        // The same mask again, from the saved state: dropout's gradient is
        // dropout, so the forward stores no mask.
        addGrad(op.getInput(),
                create<DropoutOp>(grad.getType(), grad,
                                  available(op.getRngState()), op.getRateAttr(),
                                  op.getStreamAttr(), op.getGroupAttr()));
        return success();
      })
      .Case([&](MatmulOp op) {
        matmulGrads(op, grad);
        return success();
      })
      .Case([&](GroupedMatmulOp op) { return groupedMatmulGrads(op, grad); })
      .Case([&](LayerNormFwdOp op) {
        auto bwd = create<LayerNormBwdOp>(
            op.getInput().getType(), op.getGamma().getType(),
            op.getBeta().getType(), grad, available(op.getInput()),
            available(op.getMean()), available(op.getRsigma()),
            available(op.getGamma()), op.getZeroCenteredGammaAttr());
        addGrad(op.getInput(), bwd.getInputGrad());
        addGrad(op.getGamma(), bwd.getGammaGrad());
        addGrad(op.getBeta(), bwd.getBetaGrad());
        return success();
      })
      .Case([&](RMSNormFwdOp op) {
        auto bwd = create<RMSNormBwdOp>(
            op.getInput().getType(), op.getGamma().getType(), grad,
            available(op.getInput()), available(op.getRsigma()),
            available(op.getGamma()), op.getZeroCenteredGammaAttr());
        addGrad(op.getInput(), bwd.getInputGrad());
        addGrad(op.getGamma(), bwd.getGammaGrad());
        return success();
      })
      .Case([&](RotaryOp op) {
        addGrad(
            op.getInput(),
            create<RotaryOp>(grad.getType(), grad, available(op.getFreqs()),
                             op.getQkvFormatAttr(),
                             op.getInverse() ? nullptr : builder.getUnitAttr(),
                             op.getInterleavedAttr()));
        return success();
      })
      .Case([&](AttentionOp op) {
        attentionGrads(op, grad);
        return success();
      })
      .Case([&](KvCacheAttentionOp op) {
        return op.emitOpError()
               << "has no backward: a KV cache serves inference only";
      })
      .Default([&](Operation *op) {
        return op->emitOpError()
               << "cannot be differentiated by te-autodiff (run "
                  "te-decompose first for layer ops)";
      });
}

LogicalResult Differentiator::run() {
  auto returnOp = cast<func::ReturnOp>(forward.front().getTerminator());
  MLIRContext *context = forward.getContext();
  auto name = [&](ArrayAttr attrs, unsigned index, StringRef fallback) {
    auto dict = attrs ? dyn_cast<DictionaryAttr>(attrs[index]) : nullptr;
    auto attr = dict ? dict.getAs<StringAttr>("te.name") : nullptr;
    return attr ? attr.getValue().str() : (fallback + Twine(index)).str();
  };
  for (auto [index, result] : llvm::enumerate(returnOp.getOperands())) {
    if (!isFloatTensor(result))
      continue;
    std::string gradName =
        "grad." + name(forward.getResAttrsAttr(), index, "result");
    addGrad(result,
            addArgument(result.getType(),
                        builder.getNamedAttr("te.name",
                                             builder.getStringAttr(gradName))));
  }
  for (Operation &op : llvm::reverse(forward.front().without_terminator()))
    if (failed(differentiate(&op)))
      return failure();

  SmallVector<Value> inputGrads;
  SmallVector<Attribute> resultAttrs;
  for (BlockArgument arg : forward.getArguments()) {
    Value grad = takeGrad(arg);
    if (!grad)
      continue;
    std::string argName =
        name(forward.getArgAttrsAttr(), arg.getArgNumber(), "arg");
    SmallVector<NamedAttribute> attrs = {
        builder.getNamedAttr("te.name",
                             builder.getStringAttr("grad." + argName)),
        builder.getNamedAttr("te.grad_of",
                             builder.getI64IntegerAttr(arg.getArgNumber()))};
    if (Type mainGradElement = mainGradType(arg)) {
      // The result is main_grad + the gradient, an argument of its own
      // that the caller may pass as the result's buffer too (in place:
      // te.accumulates names it).
      auto type = tensorType(grad);
      if (type.getElementType() != mainGradElement)
        return forward.emitOpError()
               << "argument '" << argName
               << "' has te.main_grad = " << mainGradElement
               << ", but its gradient is not of that type (only weights "
                  "that GEMMs read directly can accumulate into main_grad)";
      StringAttr mainGradName = builder.getStringAttr("main_grad." + argName);
      Value mainGrad =
          addArgument(type, builder.getNamedAttr("te.name", mainGradName));
      grad = create<AddOp>(type, grad, mainGrad).getResult();
      // By name: later passes add and drop backward arguments.
      attrs.push_back(builder.getNamedAttr("te.accumulates", mainGradName));
    }
    inputGrads.push_back(grad);
    resultAttrs.push_back(DictionaryAttr::get(context, attrs));
  }
  builder.create<func::ReturnOp>(forward.getLoc(), inputGrads);
  backward.setType(FunctionType::get(context,
                                     backward.front().getArgumentTypes(),
                                     ValueRange(inputGrads).getTypes()));
  backward.setAllArgAttrs(backwardArgAttrs);
  backward.setAllResultAttrs(resultAttrs);

  // The forward function hands the saved values to the backward one.
  unsigned firstSaved = forward.getNumResults();
  returnOp.getOperandsMutable().append(saved);
  SmallVector<Type> resultTypes(forward.getResultTypes());
  for (Value value : saved)
    resultTypes.push_back(value.getType());
  forward.setType(
      FunctionType::get(context, forward.getArgumentTypes(), resultTypes));
  for (auto [index, value] : llvm::enumerate(saved))
    forward.setResultAttr(firstSaved + index, "te.name",
                          builder.getStringAttr("saved." + Twine(index)));
  return success();
}

struct AutodiffPass : public tejit::impl::TEAutodiffBase<AutodiffPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<func::FuncOp> forwards;
    for (auto function : module.getOps<func::FuncOp>())
      if (!function->hasAttr("te.backward_of") && !function.isExternal())
        forwards.push_back(function);
    for (func::FuncOp forward : forwards) {
      if (!llvm::hasSingleElement(forward.getBody())) {
        forward.emitOpError() << "te-autodiff needs a single-block function";
        return signalPassFailure();
      }
      OpBuilder builder(module.getContext());
      builder.setInsertionPointAfter(forward);
      auto backward = builder.create<func::FuncOp>(
          forward.getLoc(), (forward.getName() + "_backward").str(),
          builder.getFunctionType({}, {}));
      backward->setAttr("te.backward_of",
                        FlatSymbolRefAttr::get(forward.getNameAttr()));
      backward.addEntryBlock();
      if (failed(Differentiator(forward, backward).run()))
        return signalPassFailure();
    }
  }
};
} // namespace
