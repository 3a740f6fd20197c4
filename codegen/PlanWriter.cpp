//===- PlanWriter.cpp - the executable plan a runtime loads ---------------===//
#include "codegen/PlanWriter.h"
#include "dialects/AttentionViews.h"
#include "dialects/InPlaceSum.h"
#include "dialects/TEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <functional>

using namespace mlir;
using namespace mlir::te;
using namespace tejit::codegen;
namespace json = llvm::json;

std::string tejit::codegen::binaryFileName(const BuiltKernel &kernel) {
  return "kernels/" + kernel.kernel->name +
         (kernel.isCubin ? ".cubin" : ".ptx");
}

namespace {
std::string typeString(Type type) {
  std::string text;
  llvm::raw_string_ostream os(text);
  type.print(os);
  return text;
}

int64_t elementBytesOf(Type type) {
  return (cast<RankedTensorType>(type)
              .getElementType()
              .getIntOrFloatBitWidth() +
          7) /
         8;
}

int64_t bytesOf(Type type) {
  return cast<RankedTensorType>(type).getNumElements() * elementBytesOf(type);
}

/// A GEMM operand's scaling as the plan spells it (getAScaling/getBScaling
/// of ScaledMatmulOp and GroupedScaledMatmulOp: 0 one scale (per group), 1
/// or 2 block dims).
StringRef scalingName(int64_t scaling) {
  switch (scaling) {
  case 0:
    return "tensor";
  case 1:
    return "block_1d";
  case 2:
    return "block_2d";
  default:
    // The verifier admits no other scale_inv; should one get here, the
    // runtime refuses the plan, naming the key, rather than run it with one
    // scale.
    return "invalid";
  }
}

/// Whether a grouped op reads `value` as its m_splits, directly or as the
/// argument of a te.fused region (docs/grouped-linear.md): the caller
/// passes such a function argument in host memory.
bool readAsMSplits(Value value) {
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (auto fused = dyn_cast<FusedOp>(user)) {
      if (readAsMSplits(
              fused.getBody().front().getArgument(use.getOperandNumber())))
        return true;
      continue;
    }
    Value mSplits =
        llvm::TypeSwitch<Operation *, Value>(user)
            .Case<GroupedMatmulOp, GroupedScaledMatmulOp, GroupedBiasGradOp,
                  GroupedQuantizeOp, GroupedAmaxOp, GroupedBlockQuantizeOp>(
                [](auto op) -> Value { return op.getMSplits(); })
            // The MoE permutation ops' real row counts
            // (docs/moe-permutation.md).
            .Case<MoeRowMapOp, MoeChunkRowMapOp, MoePermuteOp, MoeUnpermuteOp,
                  MoeUnpermuteGradOp, MoeGatherProbsOp>(
                [](auto op) -> Value { return op.getCounts(); })
            .Default([](Operation *) { return Value(); });
    if (mSplits == value)
      return true;
  }
  return false;
}

/// Writes one function: its values (with their storage) and its steps.
class FunctionPlan {
public:
  FunctionPlan(func::FuncOp function, ArrayRef<BuiltKernel> kernels)
      : function(function) {
    for (const BuiltKernel &built : kernels)
      kernelsOf[built.kernel->op].push_back(&built);
  }

  llvm::Expected<json::Object> write();

private:
  int64_t id(Value value);
  json::Object storage(Value value, unsigned index);
  json::Array steps();
  json::Object gemmStep(Operation *gemm, ValueRange outerOperands,
                        ValueRange outerResults, Block *region);
  json::Object attentionStep(Operation *op);
  json::Object groupedGemmStep(Operation *op, ValueRange outerOperands,
                               ValueRange outerResults, Block *region);
  /// The plan id of `value`, seen through the te.fused `region` (null for
  /// an op outside one) whose arguments stand for `outerOperands` and whose
  /// yield for `outerResults`: null for a value internal to the region.
  std::function<json::Value(Value)>
  outerRef(ValueRange outerOperands, ValueRange outerResults, Block *region);

  func::FuncOp function;
  DenseMap<Operation *, SmallVector<const BuiltKernel *>> kernelsOf;
  llvm::MapVector<Value, int64_t> ids;
};

int64_t FunctionPlan::id(Value value) {
  auto [it, inserted] = ids.insert({value, int64_t(ids.size())});
  return it->second;
}

json::Object FunctionPlan::storage(Value value, unsigned resultIndex) {
  if (auto arg = dyn_cast<BlockArgument>(value))
    return json::Object{{"arg", arg.getArgNumber()}};
  Operation *op = value.getDefiningOp();
  // A slot of an FP8 meta argument stays a view even when returned (the
  // forward saves the scale_inv it used): the runtime copies it into the
  // result buffer after the function's steps.
  if (isMetaSlotRead(op))
    return json::Object{
        {"view_of", id(op->getOperand(0))},
        {"byte_offset", cast<SliceOp>(op).getOffsetAttr().getInt() * 4}};
  // q, k and v as column ranges of the QKV projection, and attention's
  // gradients as column ranges of their concat: strided views, which only
  // the attention step reads or writes (with the step's token strides).
  if (isAttentionInputSlice(op)) {
    auto slice = cast<SliceOp>(op);
    return json::Object{
        {"view_of", id(slice.getInput())},
        {"byte_offset", slice.getOffset() * elementBytesOf(value.getType())}};
  }
  // A tensor-parallel sum in place: the GEMM output it sums.
  if (isInPlaceSum(op))
    return json::Object{{"view_of", id(op->getOperand(0))}, {"byte_offset", 0}};
  if (auto slot = gradConcatSlot(value)) {
    auto [concat, column] = *slot;
    return json::Object{
        {"view_of", id(concat.getOutput())},
        {"byte_offset", column * elementBytesOf(value.getType())}};
  }
  auto returned = cast<func::ReturnOp>(function.front().getTerminator());
  // A reshape of an argument or of a value returned as it is (the forward
  // returns the norm output both as ln_output and as a saved tensor), also
  // through further reshapes (a backward returning an output gradient
  // reshaped twice: an extra input's gradient in a chain of
  // tejit.pytorch.ops), stays a view; when returned too, the runtime
  // copies it into its result buffer.
  if (auto reshape = dyn_cast<ReshapeOp>(op)) {
    Value source = reshape->getOperand(0);
    Value root = source;
    while (auto inner = root.getDefiningOp<ReshapeOp>())
      root = inner.getInput();
    if (isa<BlockArgument>(root) ||
        llvm::is_contained(returned.getOperands(), root))
      return json::Object{{"view_of", id(source)}, {"byte_offset", 0}};
  }
  for (auto [index, operand] : llvm::enumerate(returned.getOperands()))
    if (operand == value)
      return json::Object{{"result", int64_t(index)}};
  if (isa<ReshapeOp>(op))
    return json::Object{{"view_of", id(op->getOperand(0))}, {"byte_offset", 0}};
  // te-plan-memory leaves a buffer that reaches func.return only through
  // reshapes out of the arena: it is the caller's result buffer.
  SmallVector<Value> reshaped{value};
  while (!reshaped.empty()) {
    Value current = reshaped.pop_back_val();
    for (OpOperand &use : current.getUses()) {
      if (use.getOwner() == returned.getOperation())
        return json::Object{{"result", int64_t(use.getOperandNumber())}};
      if (isa<ReshapeOp>(use.getOwner()))
        reshaped.push_back(use.getOwner()->getResult(0));
    }
  }
  auto offsets = op->getAttrOfType<ArrayAttr>("te.offsets");
  int64_t offset =
      offsets ? cast<IntegerAttr>(offsets[resultIndex]).getInt() : -1;
  return json::Object{{"arena_offset", offset}};
}

/// A GEMM and its cuBLASLt epilogue. `region` is the te.fused body (null for
/// a lone GEMM), whose arguments stand for `outerOperands` and whose yield
/// for `outerResults`.
std::function<json::Value(Value)>
FunctionPlan::outerRef(ValueRange outerOperands, ValueRange outerResults,
                       Block *region) {
  DenseMap<Value, Value> outer;
  if (region) {
    for (auto [arg, operand] : llvm::zip(region->getArguments(), outerOperands))
      outer[arg] = operand;
    for (auto [yielded, result] :
         llvm::zip(region->getTerminator()->getOperands(), outerResults))
      outer[yielded] = result;
  }
  return [this, outer = std::move(outer), region](Value value) -> json::Value {
    Value mapped = outer.lookup(value);
    if (!mapped && !region)
      mapped = value;
    return mapped ? json::Value(id(mapped)) : json::Value(nullptr);
  };
}

json::Object FunctionPlan::gemmStep(Operation *gemm, ValueRange outerOperands,
                                    ValueRange outerResults, Block *region) {
  std::function<json::Value(Value)> ref =
      outerRef(outerOperands, outerResults, region);
  json::Object step{{"kind", "gemm"},
                    {"a", ref(gemm->getOperand(0))},
                    {"b", ref(gemm->getOperand(1))},
                    {"a_type", typeString(gemm->getOperand(0).getType())},
                    {"b_type", typeString(gemm->getOperand(1).getType())}};
  if (auto scaled = dyn_cast<ScaledMatmulOp>(gemm)) {
    step["a_scale_inv"] = ref(scaled.getAScaleInv());
    step["b_scale_inv"] = ref(scaled.getBScaleInv());
    step["fast_accum"] = scaled.getFastAccum();
    step["layout"] = "TN";
    // One scale per operand, or Float8BlockScaling's block scales, read off
    // the scale_inv shapes (docs/block-scaling.md).
    step["a_scaling"] = scalingName(scaled.getAScaling());
    step["b_scaling"] = scalingName(scaled.getBScaling());
  } else {
    auto matmul = cast<MatmulOp>(gemm);
    step["transpose_a"] = matmul.getTransposeA();
    step["transpose_b"] = matmul.getTransposeB();
  }
  // The epilogue: what follows the GEMM in its region.
  json::Object epilogue;
  Value out = gemm->getResult(0);
  if (region)
    for (Operation &op : region->without_terminator()) {
      if (auto bias = dyn_cast<BiasAddOp>(op)) {
        epilogue["bias"] = ref(bias.getBias());
        out = bias.getOutput();
      } else if (auto act = dyn_cast<ActivationOp>(op)) {
        epilogue["gelu"] = true;
        epilogue["aux"] = ref(act.getInput());
        out = act.getOutput();
      } else if (auto quantize = dyn_cast<QuantizeOp>(op)) {
        epilogue["d_scale"] = ref(quantize.getScale());
        epilogue["amax_d"] = ref(quantize.getAmax());
        out = quantize.getOutput();
      } else if (auto dact = dyn_cast<ActivationGradOp>(op)) {
        epilogue["dgelu"] = true;
        epilogue["aux"] = ref(dact.getInput());
        out = dact.getOutput();
      } else if (auto bgrad = dyn_cast<BiasGradOp>(op)) {
        epilogue["bias_grad"] = ref(bgrad.getOutput());
      } else if (auto add = dyn_cast<AddOp>(op)) {
        // out = product (+ bias) + residual: the residual is cuBLASLt's C.
        Value residual = add.getLhs() == out ? add.getRhs() : add.getLhs();
        epilogue["residual"] = ref(residual);
        out = add.getOutput();
      }
    }
  step["out"] = ref(out);
  step["out_type"] = typeString(out.getType());
  step["epilogue"] = std::move(epilogue);
  return step;
}

/// te.grouped_matmul / te.grouped_scaled_matmul (docs/grouped-linear.md):
/// one cuBLASLt GEMM per non-empty group, which the runtime issues from the
/// host m_splits. In a te.fused "gemm" region (`region`, as gemmStep's) a
/// wgrad GEMM is followed by the te.add of a main_grad: "accumulate", which
/// each group's GEMM reads as C with beta = 1.
json::Object FunctionPlan::groupedGemmStep(Operation *op,
                                           ValueRange outerOperands,
                                           ValueRange outerResults,
                                           Block *region) {
  std::function<json::Value(Value)> id =
      outerRef(outerOperands, outerResults, region);
  Value a = op->getOperand(0), b = op->getOperand(1), mSplits, bias;
  bool rows;
  json::Object step{{"kind", "grouped_gemm"}, {"op", "grouped_gemm"}};
  if (auto scaled = dyn_cast<GroupedScaledMatmulOp>(op)) {
    mSplits = scaled.getMSplits();
    bias = scaled.getBias();
    rows = scaled.isRowsForm();
    step["fp8"] = true;
    step["a_scale_inv"] = id(scaled.getAScaleInv());
    step["b_scale_inv"] = id(scaled.getBScaleInv());
    // False for block scales (the verifier refuses fast_accum with them).
    step["fast_accum"] = scaled.getFastAccum();
    // One scale per group (f32 [G]) or te.grouped_block_quantize's block
    // scales (dialects/GroupedBlockScaleLayout.h), as gemm steps spell it.
    step["a_scaling"] = scalingName(scaled.getAScaling());
    step["b_scaling"] = scalingName(scaled.getBScaling());
  } else {
    auto matmul = cast<GroupedMatmulOp>(op);
    mSplits = matmul.getMSplits();
    bias = matmul.getBias();
    rows = matmul.isRowsForm();
    step["fp8"] = false;
    step["transpose_a"] = matmul.getTransposeA();
    step["transpose_b"] = matmul.getTransposeB();
  }
  Value out = op->getResult(0);
  if (region)
    for (Operation &inner : region->without_terminator())
      if (auto add = dyn_cast<AddOp>(inner)) {
        Value accumulated = add.getLhs() == out ? add.getRhs() : add.getLhs();
        step["accumulate"] = id(accumulated);
        out = add.getOutput();
      }
  step["form"] = rows ? "rows" : "contraction";
  step["a"] = id(a);
  step["b"] = id(b);
  step["m_splits"] = id(mSplits);
  step["out"] = id(out);
  step["a_type"] = typeString(a.getType());
  step["b_type"] = typeString(b.getType());
  step["out_type"] = typeString(out.getType());
  step["groups"] = cast<RankedTensorType>(mSplits.getType()).getDimSize(0);
  if (bias)
    step["bias"] = id(bias);
  return step;
}

json::Object FunctionPlan::attentionStep(Operation *op) {
  json::Array operands, results;
  for (Value operand : op->getOperands())
    operands.push_back(id(operand));
  for (Value result : op->getResults())
    results.push_back(id(result));
  json::Object attrs;
  for (NamedAttribute attr : op->getAttrs())
    if (attr.getName() != "operandSegmentSizes")
      attrs[attr.getName().strref()] = [&] {
        std::string text;
        llvm::raw_string_ostream os(text);
        attr.getValue().print(os);
        return text;
      }();
  json::Object step{{"kind", op->getName().stripDialect()},
                    {"operands", std::move(operands)},
                    {"results", std::move(results)},
                    {"attributes", std::move(attrs)}};
  // Elements between consecutive tokens of the operands and results that
  // are strided views (see dialects/AttentionViews.h).
  json::Object strides;
  auto note = [&](StringRef role, Value value) {
    if (int64_t stride = attentionTokenStride(value))
      strides[role] = stride;
  };
  llvm::TypeSwitch<Operation *>(op)
      .Case<AttentionOp, Fp8AttentionOp, KvCacheAttentionOp>([&](auto forward) {
        note("q", forward.getQuery());
        note("k", forward.getKey());
        note("v", forward.getValue());
      })
      .Case<AttentionBwdOp, Fp8AttentionBwdOp>([&](auto backward) {
        note("q", backward.getQuery());
        note("k", backward.getKey());
        note("v", backward.getValue());
        note("grad_q", backward.getQueryGrad());
        note("grad_k", backward.getKeyGrad());
        note("grad_v", backward.getValueGrad());
      });
  if (!strides.empty())
    step["token_strides"] = std::move(strides);
  return step;
}

json::Array FunctionPlan::steps() {
  json::Array steps;
  for (Operation &op : function.front().without_terminator()) {
    for (const BuiltKernel *built : kernelsOf.lookup(&op)) {
      json::Array args;
      for (const KernelParam &param : built->kernel->params)
        args.push_back(
            json::Object{{"value", id(param.value)},
                         {"output", param.isOutput},
                         {"zero_before_launch", param.zeroBeforeLaunch}});
      const EmittedKernel &k = *built->kernel;
      json::Object step{{"kind", "kernel"},
                        {"name", k.name},
                        {"binary", binaryFileName(*built)},
                        {"grid", json::Array{k.grid.x, k.grid.y, k.grid.z}},
                        {"block", json::Array{k.block.x, k.block.y, k.block.z}},
                        {"shared_bytes", k.sharedBytes},
                        {"scratch_bytes", k.scratchBytes},
                        {"args", std::move(args)}};
      // What of the scratch the launcher zeroes: a byte range, or nothing
      // when the kernel reads what the previous step's kernel left there.
      if (k.scratchFromPreviousStep)
        step["scratch_from_previous_step"] = true;
      else if (k.scratchBytes)
        step["scratch_zero"] = json::Object{{"offset", k.scratchZeroOffset},
                                            {"bytes", k.scratchZeroBytes}};
      // Every emitted kernel takes the skip flag (writeSignature).
      step["skip_flag"] = true;
      steps.push_back(std::move(step));
    }
    if (isa<MatmulOp, ScaledMatmulOp>(op))
      steps.push_back(
          gemmStep(&op, op.getOperands(), op.getResults(), nullptr));
    if (auto fused = dyn_cast<FusedOp>(op);
        fused && fused.getKind() == "gemm") {
      Block &body = fused.getBody().front();
      for (Operation &inner : body) {
        if (isa<MatmulOp, ScaledMatmulOp>(inner))
          steps.push_back(
              gemmStep(&inner, fused.getInputs(), fused.getResults(), &body));
        if (isa<GroupedMatmulOp, GroupedScaledMatmulOp>(inner))
          steps.push_back(groupedGemmStep(&inner, fused.getInputs(),
                                          fused.getResults(), &body));
      }
    }
    if (isa<GroupedMatmulOp, GroupedScaledMatmulOp>(op))
      steps.push_back(
          groupedGemmStep(&op, op.getOperands(), op.getResults(), nullptr));
    // FP8 attention's steps are written alike, kinds "fp8_attention" and
    // "fp8_attention_bwd" (docs/fp8-attention.md).
    if (isa<AttentionOp, AttentionBwdOp, Fp8AttentionOp, Fp8AttentionBwdOp,
            KvCacheAttentionOp>(op))
      steps.push_back(attentionStep(&op));
    if (auto reduce = dyn_cast<AmaxAllReduceOp>(op))
      steps.push_back(json::Object{{"kind", "amax_allreduce"},
                                   {"in", id(reduce.getAmaxes())},
                                   {"out", id(reduce.getOutput())}});
    // Tensor parallelism's collectives (docs/tensor-parallel.md).
    auto collective = [&](StringRef kind, Value in, Value out, uint64_t ranks) {
      steps.push_back(json::Object{
          {"kind", kind}, {"in", id(in)}, {"out", id(out)}, {"ranks", ranks}});
    };
    if (auto reduce = dyn_cast<TpAllReduceOp>(op))
      collective("tp_allreduce", reduce.getInput(), reduce.getOutput(),
                 reduce.getRanks());
    if (auto gather = dyn_cast<TpAllGatherOp>(op))
      collective("tp_allgather", gather.getInput(), gather.getOutput(),
                 gather.getRanks());
    if (auto scatter = dyn_cast<TpReduceScatterOp>(op))
      collective("tp_reducescatter", scatter.getInput(), scatter.getOutput(),
                 scatter.getRanks());
    // Context parallelism's (docs/context-parallel.md): the gather's input
    // and the reduce-scatter's output are this rank's tokens, packed.
    auto cpCollective = [&](StringRef kind, auto cpOp) {
      steps.push_back(json::Object{{"kind", kind},
                                   {"in", id(cpOp.getInput())},
                                   {"out", id(cpOp.getOutput())},
                                   {"ranks", cpOp.getRanks()},
                                   {"seq_dim", cpOp.getSeqDim()},
                                   {"load_balanced", cpOp.getLoadBalanced()}});
    };
    if (auto gather = dyn_cast<CpAllGatherOp>(op))
      cpCollective("cp_allgather", gather);
    if (auto scatter = dyn_cast<CpReduceScatterOp>(op))
      cpCollective("cp_reducescatter", scatter);
    // cp_comm_type a2a: the direction is in the values' shapes.
    if (auto allToAll = dyn_cast<CpAllToAllOp>(op))
      steps.push_back(
          json::Object{{"kind", "cp_alltoall"},
                       {"in", id(allToAll.getInput())},
                       {"out", id(allToAll.getOutput())},
                       {"ranks", allToAll.getRanks()},
                       {"seq_dim", allToAll.getSeqDim()},
                       {"head_dim", allToAll.getHeadDim()},
                       {"load_balanced", allToAll.getLoadBalanced()}});
  }
  return steps;
}

llvm::Expected<json::Object> FunctionPlan::write() {
  auto named = [&](DictionaryAttr attrs) {
    json::Object object;
    if (attrs)
      for (NamedAttribute attr : attrs) {
        if (auto text = dyn_cast<StringAttr>(attr.getValue()))
          object[attr.getName().strref()] = text.getValue();
        else if (auto number = dyn_cast<IntegerAttr>(attr.getValue()))
          object[attr.getName().strref()] = number.getInt();
        else if (isa<UnitAttr>(attr.getValue()))
          object[attr.getName().strref()] = true;
      }
    return object;
  };
  json::Array arguments, results;
  for (BlockArgument arg : function.getArguments()) {
    json::Object object = named(function.getArgAttrDict(arg.getArgNumber()));
    object["value"] = id(arg);
    // m_splits: G int32 values the caller passes in host memory.
    if (readAsMSplits(arg))
      object["host"] = true;
    arguments.push_back(std::move(object));
  }
  auto returned = cast<func::ReturnOp>(function.front().getTerminator());
  for (auto [index, value] : llvm::enumerate(returned.getOperands())) {
    json::Object object = named(function.getResultAttrDict(index));
    object["value"] = id(value);
    results.push_back(std::move(object));
  }
  // Ids for every top-level value, in program order, before steps use them.
  for (Operation &op : function.front().without_terminator())
    for (Value result : op.getResults())
      id(result);
  json::Array stepList = steps();
  json::Array values;
  for (auto [value, valueId] : ids) {
    unsigned resultIndex =
        isa<OpResult>(value) ? cast<OpResult>(value).getResultNumber() : 0;
    values.push_back(json::Object{{"id", valueId},
                                  {"type", typeString(value.getType())},
                                  {"bytes", bytesOf(value.getType())},
                                  {"storage", storage(value, resultIndex)}});
  }
  json::Object plan{{"name", function.getName()},
                    {"arguments", std::move(arguments)},
                    {"results", std::move(results)},
                    {"values", std::move(values)},
                    {"steps", std::move(stepList)}};
  if (auto arena = function->getAttrOfType<IntegerAttr>("te.arena_bytes"))
    plan["arena_bytes"] = arena.getInt();
  if (auto of = function->getAttrOfType<FlatSymbolRefAttr>("te.backward_of"))
    plan["backward_of"] = of.getValue();
  if (auto of = function->getAttrOfType<FlatSymbolRefAttr>("te.wgrad_of"))
    plan["wgrad_of"] = of.getValue();
  return plan;
}
} // namespace

llvm::Expected<json::Value>
tejit::codegen::writePlan(ModuleOp module, ArrayRef<BuiltKernel> kernels,
                          StringRef arch) {
  json::Array functions;
  bool hasWgrad = false;
  for (auto function : module.getOps<func::FuncOp>()) {
    hasWgrad |= function->hasAttr("te.wgrad_of");
    llvm::Expected<json::Object> plan = FunctionPlan(function, kernels).write();
    if (!plan)
      return plan.takeError();
    functions.push_back(std::move(*plan));
  }
  return json::Object{{"format", "tejit-plan"},
                      // 3: update kernels may write the state in place.
                      // 4: kernels take a skip flag. 5: host arguments
                      // (m_splits) and grouped_gemm steps. 6: wgrad
                      // functions (delay_wgrad_compute; only plans that
                      // have one say 6, which older runtimes refuse).
                      {"version", hasWgrad ? 6 : 5},
                      {"arch", arch},
                      {"build_id", tejit::buildId()},
                      {"functions", std::move(functions)}};
}
