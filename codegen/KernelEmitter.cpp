//===- KernelEmitter.cpp - CUDA C++ for te kernels: groups and names ------===//
#include "codegen/EmitterImpl.h"

#include "dialects/AttentionViews.h"
#include "dialects/TEDialect.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>
#include <cstdio>

using namespace mlir;
using namespace mlir::te;
using namespace tejit::codegen;

namespace {
#include "codegen/DeviceHelpers.inc"
} // namespace

llvm::StringRef tejit::codegen::deviceHelpers() { return kDeviceHelpers; }

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

std::string tejit::codegen::elementTypeName(Type type) {
  if (type.isBF16())
    return "tj_bf16";
  if (type.isF16())
    return "tj_f16";
  if (type.isF32())
    return "float";
  if (type.isFloat8E4M3FN())
    return "tj_e4m3";
  if (type.isFloat8E5M2())
    return "tj_e5m2";
  if (type.isInteger(1))
    return "tj_bool";
  if (type.isInteger(64))
    return "tj_i64";
  // m_splits (GroupedLinear's segment sizes).
  if (type.isInteger(32))
    return "int";
  return "";
}

int64_t tejit::codegen::elementBytes(Type type) {
  return (type.getIntOrFloatBitWidth() + 7) / 8;
}

RankedTensorType tejit::codegen::tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

int64_t tejit::codegen::rowsOf(Value value) {
  auto type = tensorType(value);
  return type.getNumElements() / type.getShape().back();
}

int64_t tejit::codegen::colsOf(Value value) {
  return tensorType(value).getShape().back();
}

std::string tejit::codegen::floatLiteral(double value) {
  float f = static_cast<float>(value);
  if (std::isinf(f))
    return f > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  char text[32];
  std::snprintf(text, sizeof(text), "%.9gf", f);
  std::string literal(text);
  // "1f" is not a float literal: give it a point.
  if (literal.find_first_of(".e") == std::string::npos)
    literal.insert(literal.size() - 1, ".");
  return literal;
}

int64_t tejit::codegen::vectorWidth(ArrayRef<int64_t> widths,
                                    int64_t elementBytes) {
  for (int64_t vec = 8; vec > 1; vec /= 2)
    if (vec * elementBytes <= 16 &&
        llvm::all_of(widths, [&](int64_t w) { return w % vec == 0; }))
      return vec;
  return 1;
}

llvm::Error tejit::codegen::noEmitter(Operation *op, StringRef why) {
  std::string message =
      ("te-emit: no CUDA emitter for " + op->getName().getStringRef() + " yet")
          .str();
  if (auto fused = dyn_cast<FusedOp>(op))
    message += (" (kind '" + fused.getKind() + "')").str();
  if (!why.empty())
    message += (": " + why).str();
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

//===----------------------------------------------------------------------===//
// KernelBuilder
//===----------------------------------------------------------------------===//

/// `text` as a C identifier: other characters become '_'.
static std::string identifier(StringRef text) {
  std::string id;
  for (char c : text)
    id.push_back(llvm::isAlnum(c) ? c : '_');
  while (!id.empty() && id.front() == '_')
    id.erase(id.begin());
  if (id.empty() || llvm::isDigit(id.front()))
    id.insert(0, "v");
  return id;
}

/// The name of what a backward argument stands for in its forward: the
/// forward argument it is (`te.forward_arg`), or the forward result it is
/// (`te.forward_result`): the forward argument that result returns as it is
/// (the dropout state), else the result's own name (`saved.3`). Null when
/// `arg` is not a backward argument.
static StringAttr forwardNameOf(func::FuncOp backward, BlockArgument arg) {
  auto forwardRef =
      backward->getAttrOfType<FlatSymbolRefAttr>("te.backward_of");
  auto forward = forwardRef
                     ? SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(
                           backward, forwardRef)
                     : nullptr;
  if (!forward)
    return {};
  unsigned number = arg.getArgNumber();
  if (auto index =
          backward.getArgAttrOfType<IntegerAttr>(number, "te.forward_arg"))
    return forward.getArgAttrOfType<StringAttr>(index.getInt(), "te.name");
  auto index =
      backward.getArgAttrOfType<IntegerAttr>(number, "te.forward_result");
  if (!index || index.getInt() >= forward.getNumResults())
    return {};
  Value returned = forward.front().getTerminator()->getOperand(index.getInt());
  if (auto forwardArg = dyn_cast<BlockArgument>(returned))
    if (auto name = forward.getArgAttrOfType<StringAttr>(
            forwardArg.getArgNumber(), "te.name"))
      return name;
  return forward.getResultAttrOfType<StringAttr>(index.getInt(), "te.name");
}

std::string KernelBuilder::valueName(Value value) {
  if (auto arg = dyn_cast<BlockArgument>(value))
    if (auto function = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp())) {
      if (auto name = function.getArgAttrOfType<StringAttr>(arg.getArgNumber(),
                                                            "te.name"))
        return identifier(name.getValue());
      if (StringAttr name = forwardNameOf(function, arg))
        return identifier(name.getValue());
    }
  std::string text;
  llvm::raw_string_ostream os(text);
  value.printAsOperand(os, asmState);
  return identifier(text);
}

KernelBuilder::KernelBuilder(const KernelGroup &group, std::string name,
                             AsmState &asmState)
    : group(group), name(std::move(name)), asmState(asmState) {
  llvm::StringSet<> used;
  auto add = [&](Value inner, bool output) {
    if (paramIndex.count(inner))
      return;
    // Results are named after the op that computes them inside the region
    // (%mean, %amax) unless only a number names them there.
    std::string base = valueName(group.outerOf(inner));
    if (output) {
      std::string innerName = valueName(inner);
      if (!llvm::isDigit(innerName[1]) &&
          !StringRef(innerName).starts_with("arg"))
        base = innerName;
    }
    std::string unique = base;
    for (int n = 1; !used.insert(unique).second; ++n)
      unique = base + "_" + std::to_string(n);
    Operation *def = inner.getDefiningOp();
    bool isAmax = def && (isa<AmaxOp, GroupedAmaxOp>(def) ||
                          (isa<QuantizeOp, GroupedQuantizeOp>(def) &&
                           cast<OpResult>(inner).getResultNumber() == 1));
    paramIndex[inner] = params.size();
    params.push_back({group.outerOf(inner), unique,
                      elementTypeName(tensorType(inner).getElementType()),
                      output, output && isAmax});
  };
  for (Value input : group.inputs)
    add(input, false);
  for (Value output : group.outputs)
    add(output, true);
}

StringRef KernelBuilder::param(Value inner) const {
  auto it = paramIndex.find(inner);
  assert(it != paramIndex.end() && "not a kernel parameter");
  return params[it->second].name;
}

void KernelBuilder::writeSignature(CudaWriter &w, int64_t threadsPerBlock,
                                   int64_t minBlocksPerSm,
                                   bool restrictPointers) {
  w.raw(deviceHelpers());
  w.line();
  std::string location;
  llvm::raw_string_ostream os(location);
  group.op->getLoc().print(os);
  w.line("// " + name + ": te." + group.kind + " at " + location);
  std::string bounds = std::to_string(threadsPerBlock);
  if (minBlocksPerSm > 0)
    bounds += ", " + std::to_string(minBlocksPerSm);
  w.line("extern \"C\" __global__ void __launch_bounds__(" + bounds + ")");
  w.line(name + "(");
  std::string pointer = restrictPointers ? " *__restrict__ " : " *";
  std::vector<std::string> decls;
  for (const KernelParam &p : params)
    decls.push_back("    " + std::string(p.isOutput ? "" : "const ") +
                    p.elementType + pointer + p.name);
  if (scratch.bytes)
    decls.push_back("    float" + pointer + "tj_scratch");
  // Every kernel takes a skip flag last: the runtime passes null, or, for a
  // weight cast run in a CUDA graph that replays both for micro-batches
  // that cast and for ones that reuse the cast (TE's
  // skip_fp8_weight_update), a device int read at each launch.
  decls.push_back("    const int *tj_skip");
  for (auto [index, decl] : llvm::enumerate(decls)) {
    if (index + 1 == decls.size())
      w.open(decl + ")");
    else
      w.line(decl + ",");
  }
  // Before any barrier: every thread of every block leaves together.
  w.line("if (tj_skip != nullptr && *tj_skip != 0) return;");
}

void tejit::codegen::writeLastBlockOfStrip(CudaWriter &w,
                                           llvm::StringRef counters) {
  w.line("__shared__ bool tj_last_block;");
  w.line("__threadfence();  // this block's partial sums before its ticket");
  w.line("__syncthreads();");
  w.line("if (threadIdx.x == 0) tj_last_block = atomicAdd(&" + counters.str() +
         "[blockIdx.x], 1u) == gridDim.y - 1;");
  w.line("__syncthreads();");
  w.line("if (!tj_last_block) return;");
  w.line("__threadfence();");
}

EmittedKernel KernelBuilder::finish(CudaWriter &w, Dim3 grid, Dim3 block) {
  w.close();
  EmittedKernel kernel;
  kernel.name = name;
  kernel.source = w.str();
  kernel.params = params;
  kernel.grid = grid;
  kernel.block = block;
  kernel.scratchBytes = scratch.bytes;
  kernel.scratchZeroOffset = scratch.zeroOffset;
  kernel.scratchZeroBytes = scratch.zeroBytes;
  kernel.scratchFromPreviousStep = scratch.fromPreviousStep;
  kernel.op = group.op;
  return kernel;
}

//===----------------------------------------------------------------------===//
// Grouping and dispatch
//===----------------------------------------------------------------------===//

static KernelGroup groupOf(FusedOp fused) {
  KernelGroup group;
  group.op = fused;
  group.kind = fused.getKind().str();
  Block &body = fused.getBody().front();
  for (auto [arg, operand] :
       llvm::zip(body.getArguments(), fused.getInputs())) {
    group.inputs.push_back(arg);
    group.outer[arg] = operand;
  }
  for (Operation &op : body.without_terminator())
    group.ops.push_back(&op);
  for (auto [value, result] :
       llvm::zip(body.getTerminator()->getOperands(), fused.getResults())) {
    group.outputs.push_back(value);
    group.outer[value] = result;
  }
  return group;
}

static KernelGroup groupOf(Operation *op) {
  KernelGroup group;
  group.op = op;
  group.kind = op->getName().stripDialect().str();
  group.ops.push_back(op);
  llvm::SetVector<Value> inputs(op->getOperands().begin(),
                                op->getOperands().end());
  group.inputs.assign(inputs.begin(), inputs.end());
  group.outputs.assign(op->getResults().begin(), op->getResults().end());
  return group;
}

/// Ops that launch nothing here: views (reshapes, meta slot reads, q/k/v
/// slices that attention reads strided), library calls (cuBLASLt, cuDNN),
/// the concat that attention's gradients are written into, and the
/// collectives over ranks (amax all-reduces, tensor-parallel sums, gathers
/// and scatters, context parallelism's gathers, scatters and all-to-alls:
/// runtime steps).
static bool needsNoKernel(Operation *op) {
  return isa<ReshapeOp, MatmulOp, ScaledMatmulOp, GroupedMatmulOp,
             GroupedScaledMatmulOp, AttentionOp, AttentionBwdOp, Fp8AttentionOp,
             Fp8AttentionBwdOp, KvCacheAttentionOp, AmaxAllReduceOp,
             TpAllReduceOp, TpAllGatherOp, TpReduceScatterOp, CpAllGatherOp,
             CpReduceScatterOp, CpAllToAllOp, func::ReturnOp>(op) ||
         isMetaSlotRead(op) || isAttentionInputSlice(op) ||
         isAttentionGradConcat(op) ||
         (isa<FusedOp>(op) && cast<FusedOp>(op).getKind() == "gemm");
}

/// The family that writes `group`'s kernels.
static llvm::Error emitGroup(KernelBuilder &builder,
                             std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  bool hasNormFwd = llvm::any_of(group.ops, [](Operation *op) {
    return isa<LayerNormFwdOp, RMSNormFwdOp>(op);
  });
  Operation *first = group.ops.front();
  if (hasNormFwd)
    return emitNormForward(builder, kernels);
  if (isa<LayerNormBwdOp, RMSNormBwdOp>(first))
    return emitNormBackward(builder, kernels);
  if (isa<ComputeScaleOp, DelayedScalingUpdateOp>(first))
    return emitScaling(builder, kernels);
  if (isa<SliceOp, ConcatOp>(first))
    return emitCopy(builder, kernels);
  if (isa<BlockQuantizeOp>(first))
    return emitBlockQuantize(builder, kernels);
  if (isa<GroupedQuantizeOp, GroupedAmaxOp>(first))
    return emitGroupedCast(builder, kernels);
  if (isa<GroupedBlockQuantizeOp>(first))
    return emitGroupedBlockQuantize(builder, kernels);
  if (isa<GroupedBiasGradOp>(first))
    return emitGroupedBiasGrad(builder, kernels);
  if (isa<CrossEntropyStatsOp, CrossEntropyLossOp, CrossEntropyMeanOp,
          CrossEntropyBwdOp>(first))
    return emitCrossEntropy(builder, kernels);
  if (isa<MoeRowMapOp, MoeChunkRowMapOp, MoePermuteOp, MoeUnpermuteOp,
          MoeUnpermuteGradOp, MoeGatherProbsOp>(first))
    return emitMoe(builder, kernels);
  if (isa<RouterTopkOp, RouterTopkBwdOp, RouterAuxScoresOp,
          RouterAuxScoresBwdOp, RouterAuxLossOp, RouterAuxLossBwdOp>(first))
    return emitRouter(builder, kernels);
  if (isa<RotaryOp>(first) && group.ops.size() == 1)
    return emitRotary(builder, kernels);
  bool pointwise = llvm::all_of(group.ops, [](Operation *op) {
    return isa<BiasAddOp, ActivationOp, ActivationGradOp, AddOp, DropoutOp,
               QuantizeOp, DequantizeOp, AmaxOp, TransposeOp, BiasGradOp>(op);
  });
  if (pointwise)
    return emitPointwise(builder, kernels);
  return noEmitter(group.op);
}

llvm::Expected<std::vector<EmittedKernel>>
tejit::codegen::emitKernels(func::FuncOp function) {
  std::vector<EmittedKernel> kernels;
  AsmState asmState(function);
  // Numbered per kind, so that a kernel keeps its name when kernels of
  // other kinds come and go.
  llvm::StringMap<unsigned> countOfKind;
  for (Operation &op : function.getBody().front()) {
    if (needsNoKernel(&op))
      continue;
    KernelGroup group =
        isa<FusedOp>(op) ? groupOf(cast<FusedOp>(op)) : groupOf(&op);
    std::string name =
        identifier(llvm::formatv("{0}_{1}_{2}", function.getName(), group.kind,
                                 countOfKind[group.kind]++)
                       .str());
    KernelBuilder builder(group, name, asmState);
    if (llvm::Error error = emitGroup(builder, kernels))
      return std::move(error);
  }
  return kernels;
}

llvm::Expected<std::vector<EmittedKernel>>
tejit::codegen::emitKernels(ModuleOp module) {
  std::vector<EmittedKernel> kernels;
  for (auto function : module.getOps<func::FuncOp>()) {
    auto emitted = emitKernels(function);
    if (!emitted)
      return emitted.takeError();
    for (EmittedKernel &kernel : *emitted)
      kernels.push_back(std::move(kernel));
  }
  return kernels;
}
