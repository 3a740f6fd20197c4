//===- AttentionLauncher.cpp - a plan's attention step on cuDNN -----------===//
#include "runtime/AttentionLauncher.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace tejit::runtime;
using llvm::Error;
using llvm::StringRef;

namespace {
#include "AttentionPrepPtx.inc"

/// cuDNN wants 16-byte aligned tensors; scratch pieces start on 256 bytes.
constexpr size_t scratchAlignment = 256;
size_t alignUp(size_t bytes) {
  return (bytes + scratchAlignment - 1) / scratchAlignment * scratchAlignment;
}

/// The Philox counter distance between the dropout streams of two attention
/// sites of one program; each forward moves the program's offset by 2^32.
constexpr unsigned siteOffsetShift = 16;

/// The step's attributes as the plan printed them.
struct StepAttributes {
  const AttentionStep &step;
  const FunctionPlan &function;

  Error error(const llvm::Twine &message) const {
    return makeError(ErrorCode::Unsupported,
                     llvm::formatv("function '{0}', attention step: {1}",
                                   function.name, message.str()));
  }
  std::optional<StringRef> raw(StringRef name) const {
    auto found = step.attributes.find(name.str());
    if (found == step.attributes.end())
      return std::nullopt;
    return StringRef(found->second);
  }
  /// "#te.attn_mask_type<causal>" -> "causal".
  llvm::Expected<StringRef> enumCase(StringRef name) const {
    std::optional<StringRef> text = raw(name);
    if (!text)
      return error("has no '" + name + "' attribute");
    size_t open = text->find('<'), close = text->rfind('>');
    if (open == StringRef::npos || close == StringRef::npos || close < open)
      return error("attribute '" + name + "' is '" + *text +
                   "', not an enum attribute");
    return text->slice(open + 1, close).trim();
  }
  /// "2.500000e-01 : f64" -> 0.25; `fallback` when absent.
  llvm::Expected<double> number(StringRef name, double fallback) const {
    std::optional<StringRef> text = raw(name);
    if (!text)
      return fallback;
    double value = 0;
    if (text->split(':').first.trim().getAsDouble(value))
      return error("attribute '" + name + "' is '" + *text + "', not a number");
    return value;
  }
  /// "array<i64: 4096, 0>" -> {4096, 0}; {-1, -1} when absent.
  llvm::Expected<std::pair<int64_t, int64_t>> window(StringRef name) const {
    std::optional<StringRef> text = raw(name);
    if (!text)
      return std::pair<int64_t, int64_t>{-1, -1};
    StringRef body = text->trim();
    int64_t left = 0, right = 0;
    if (!body.consume_front("array<i64:") || !body.consume_back(">"))
      return error("attribute '" + name + "' is '" + *text +
                   "', not an array<i64: left, right>");
    auto [first, second] = body.split(',');
    if (first.trim().getAsInteger(10, left) ||
        second.trim().getAsInteger(10, right))
      return error("attribute '" + name + "' is '" + *text +
                   "', not an array<i64: left, right>");
    return std::pair<int64_t, int64_t>{left, right};
  }
};

llvm::Expected<AttentionMask> maskOf(StringRef name, bool sameLengths,
                                     const StepAttributes &attributes) {
  // With as many queries as keys (self-attention), bottom-right alignment
  // is top-left alignment.
  if (name == "no_mask")
    return AttentionMask::None;
  if (name == "causal" || (sameLengths && name == "causal_bottom_right"))
    return AttentionMask::Causal;
  if (name == "padding")
    return AttentionMask::Padding;
  if (name == "padding_causal" ||
      (sameLengths && name == "padding_causal_bottom_right"))
    return AttentionMask::PaddingCausal;
  return attributes.error("attn_mask_type '" + name +
                          "' is not supported by the cuDNN path yet "
                          "(no_mask, causal, padding and padding_causal are)");
}
} // namespace

const char *tejit::runtime::attentionPrepPtx() { return tejitAttentionPrepPtx; }

llvm::Expected<AttentionLauncher>
AttentionLauncher::create(const AttentionStep &step,
                          const FunctionPlan &function, CUfunction prep) {
  StepAttributes attributes{step, function};
  AttentionLauncher launcher;
  launcher.prep = prep;
  // Optional operands (mask, rng) follow the fixed ones; their element types
  // tell them apart (the plan drops operandSegmentSizes).
  size_t fixed = step.backward ? 6 : 3;
  size_t results = step.backward ? 3 : 2;
  if (step.operands.size() < fixed || step.operands.size() > fixed + 3 ||
      step.results.size() != results)
    return attributes.error(llvm::formatv(
        "expected {0} to {1} operands and {2} results, got {3} and {4}", fixed,
        fixed + 3, results, step.operands.size(), step.results.size()));
  // Masks come in operand order: the padding mask, then the query mask.
  for (int64_t id : llvm::ArrayRef(step.operands).drop_front(fixed)) {
    ElementType element = function.values[id].type.element;
    if (element == ElementType::I1 && !launcher.mask)
      launcher.mask = id;
    else if (element == ElementType::I1 && !launcher.queryMask)
      launcher.queryMask = id;
    else if (element == ElementType::I64 && !launcher.rng)
      launcher.rng = id;
    else
      return attributes.error("an optional operand is neither an i1 mask nor "
                              "an i64 RNG state");
  }
  const auto &ops = step.operands;
  if (step.backward) {
    launcher.gradOut = ops[0];
    launcher.q = ops[1];
    launcher.k = ops[2];
    launcher.v = ops[3];
    launcher.out = ops[4];
    launcher.stats = ops[5];
    launcher.gradQ = step.results[0];
    launcher.gradK = step.results[1];
    launcher.gradV = step.results[2];
  } else {
    launcher.q = ops[0];
    launcher.k = ops[1];
    launcher.v = ops[2];
    launcher.out = step.results[0];
    launcher.stats = step.results[1];
  }

  auto format = attributes.enumCase("qkv_format");
  if (!format)
    return format.takeError();
  AttentionProblem &problem = launcher.problemDesc;
  problem.backward = step.backward;
  if (*format == "sbhd")
    problem.layout = AttentionLayout::Sbhd;
  else if (*format == "bshd")
    problem.layout = AttentionLayout::Bshd;
  else
    return attributes.error("qkv_format '" + *format +
                            "' is not supported (sbhd and bshd are)");
  const TensorType &qType = function.values[launcher.q].type;
  const TensorType &kType = function.values[launcher.k].type;
  if (qType.shape.size() != 4 || kType.shape.size() != 4)
    return attributes.error("query and key must be 4-D");
  bool sbhd = problem.layout == AttentionLayout::Sbhd;
  problem.seqQ = qType.shape[sbhd ? 0 : 1];
  problem.batch = qType.shape[sbhd ? 1 : 0];
  problem.heads = qType.shape[2];
  problem.headDim = qType.shape[3];
  problem.seqKv = kType.shape[sbhd ? 0 : 1];
  problem.kvHeads = kType.shape[2];
  problem.element = qType.element;
  auto strideOf = [&](const char *role) -> int64_t {
    auto found = step.tokenStrides.find(role);
    return found == step.tokenStrides.end() ? 0 : found->second;
  };
  problem.tokenStrides = {strideOf("q"),      strideOf("k"),
                          strideOf("v"),      strideOf("grad_q"),
                          strideOf("grad_k"), strideOf("grad_v")};
  if (!step.backward &&
      (problem.tokenStrides.gradQ || problem.tokenStrides.gradK ||
       problem.tokenStrides.gradV))
    return attributes.error("the forward has no gradients to give strides");

  auto maskName = attributes.enumCase("attn_mask_type");
  if (!maskName)
    return maskName.takeError();
  auto maskKind = maskOf(*maskName, problem.seqQ == problem.seqKv, attributes);
  if (!maskKind)
    return maskKind.takeError();
  problem.mask = *maskKind;
  bool padding = problem.mask == AttentionMask::Padding ||
                 problem.mask == AttentionMask::PaddingCausal;
  if (padding) {
    if (!launcher.mask)
      return attributes.error("a padding mask type without a mask operand");
    const TensorType &maskType = function.values[*launcher.mask].type;
    std::vector<int64_t> expected{problem.batch, 1, 1, problem.seqKv};
    // Self-attention: the mask pads queries and keys alike; cross-attention
    // (s_q != s_kv, or pad_keys_only): it pads the keys, and the queries
    // are valid unless a query mask pads them.
    bool keysOnly = problem.seqQ != problem.seqKv ||
                    attributes.raw("pad_keys_only").has_value();
    launcher.fullQueryLengths = keysOnly && !launcher.queryMask;
    if (launcher.queryMask) {
      const TensorType &queryMaskType =
          function.values[*launcher.queryMask].type;
      if (!keysOnly ||
          queryMaskType.shape !=
              std::vector<int64_t>{problem.batch, 1, 1, problem.seqQ})
        return attributes.error("a query mask needs cross-attention and the "
                                "shape [b, 1, 1, s_q]");
      if (problem.backward && problem.tokenStrides.gradQ)
        return attributes.error("a query mask with a strided dq");
      int64_t id = problem.backward ? launcher.gradQ : launcher.out;
      launcher.zeroedBytes = size_t(function.values[id].type.bytes());
    }
    if (maskType.shape != expected)
      return attributes.error(
          "the cuDNN path takes a padding mask [b, 1, 1, s_kv] "
          "(Transformer Engine's, True = padded; right padding); got a "
          "mask of " +
          llvm::join(
              llvm::map_range(maskType.shape,
                              [](int64_t d) { return std::to_string(d); }),
              "x") +
          " for " + std::to_string(problem.seqQ) + " queries and " +
          std::to_string(problem.seqKv) + " keys");
  } else {
    if (launcher.queryMask)
      return attributes.error("a query mask without a padding mask type");
    launcher.mask.reset(); // an unused mask operand
  }

  auto scale = attributes.number("softmax_scale", 0);
  auto dropout = attributes.number("dropout", 0);
  auto site = attributes.number("stream", 0);
  if (!scale)
    return scale.takeError();
  if (!dropout)
    return dropout.takeError();
  if (!site)
    return site.takeError();
  auto window = attributes.window("window_size");
  if (!window)
    return window.takeError();
  problem.softmaxScale = *scale;
  problem.dropout = *dropout;
  problem.windowLeft = window->first;
  problem.windowRight = window->second;
  // A right bound of 0 is the causal mask (with as many queries as keys),
  // and a causal mask already hides every key right of the diagonal.
  if (problem.windowRight == 0 && problem.seqQ == problem.seqKv) {
    if (problem.mask == AttentionMask::None)
      problem.mask = AttentionMask::Causal;
    else if (problem.mask == AttentionMask::Padding)
      problem.mask = AttentionMask::PaddingCausal;
  }
  if (problem.causal())
    problem.windowRight = -1;
  if (problem.dropout > 0 && !launcher.rng)
    return attributes.error("attention dropout without an RNG state operand");
  if (problem.dropout == 0)
    launcher.rng.reset();
  launcher.offsetDelta = uint64_t(*site) << siteOffsetShift;

  auto runner = AttentionRunner::get(problem);
  if (!runner)
    return annotate(runner.takeError(),
                    "function '" + function.name + "', attention step",
                    ErrorCode::Unsupported);
  launcher.runner = std::move(*runner);
  return launcher;
}

size_t AttentionLauncher::scratchBytes() const {
  return 2 * alignUp(problemDesc.batch * sizeof(int32_t)) + alignUp(16) +
         alignUp(runner->workspaceBytes());
}

Error AttentionLauncher::run(llvm::ArrayRef<CUdeviceptr> addresses,
                             CUdeviceptr scratch, CUstream stream,
                             const CudaDriver &driver) const {
  size_t lengthsBytes = alignUp(problemDesc.batch * sizeof(int32_t));
  CUdeviceptr seqLens = scratch;
  CUdeviceptr queryLens = seqLens + lengthsBytes;
  CUdeviceptr rngState = queryLens + lengthsBytes;
  CUdeviceptr workspace = rngState + alignUp(16);
  AttentionPointers pointers;
  pointers.q = addresses[q];
  pointers.k = addresses[k];
  pointers.v = addresses[v];
  pointers.o = addresses[out];
  pointers.stats = addresses[stats];
  if (problemDesc.backward) {
    pointers.gradO = addresses[gradOut];
    pointers.gradQ = addresses[gradQ];
    pointers.gradK = addresses[gradK];
    pointers.gradV = addresses[gradV];
  }
  if (mask || rng) {
    CUdeviceptr maskPointer = mask ? addresses[*mask] : 0;
    CUdeviceptr rngIn = rng ? addresses[*rng] : 0;
    int batch = int(problemDesc.batch), seq = int(problemDesc.seqKv);
    uint64_t delta = offsetDelta;
    void *params[] = {&maskPointer, &batch,    &seq,  &seqLens,
                      &rngIn,       &rngState, &delta};
    unsigned threads = unsigned(std::min<int64_t>(problemDesc.batch, 1024));
    if (Error error = driver.check(
            driver.cuLaunchKernel(prep, 1, 1, 1, std::max(threads, 32u), 1, 1,
                                  0, stream, params, nullptr),
            "launching the attention prep kernel"))
      return error;
    if (mask) {
      pointers.seqLenQ = pointers.seqLenKv = seqLens;
      if (queryMask) {
        // The queries' lengths from their own mask; their padded rows of
        // the output (or dq) are zeroed first, as cuDNN leaves them.
        CUdeviceptr queryMaskPointer = addresses[*queryMask];
        CUdeviceptr noRng = 0;
        int seqQ = int(problemDesc.seqQ);
        void *queryParams[] = {&queryMaskPointer,
                               &batch,
                               &seqQ,
                               &queryLens,
                               &noRng,
                               &noRng,
                               &delta};
        if (Error error = driver.check(
                driver.cuLaunchKernel(prep, 1, 1, 1, std::max(threads, 32u), 1,
                                      1, 0, stream, queryParams, nullptr),
                "launching the attention prep kernel (query mask)"))
          return error;
        CUdeviceptr zeroed = problemDesc.backward ? pointers.gradQ : pointers.o;
        if (Error error = driver.check(
                driver.cuMemsetD8Async(zeroed, 0, zeroedBytes, stream),
                "zeroing the rows of padded queries"))
          return error;
        pointers.seqLenQ = queryLens;
      } else if (fullQueryLengths) {
        if (Error error = driver.check(
                driver.cuMemsetD32Async(queryLens, unsigned(problemDesc.seqQ),
                                        size_t(problemDesc.batch), stream),
                "setting the query lengths of a cross-attention"))
          return error;
        pointers.seqLenQ = queryLens;
      }
    }
    if (rng) {
      pointers.seed = rngState;
      pointers.offset = rngState + sizeof(uint64_t);
    }
  }
  return runner->run(pointers, workspace, stream);
}
