//===- GroupedGemm.cpp - a plan's grouped GEMMs through cuBLASLt ----------===//
//
// Each group is an ordinary plan GEMM (GemmStep) over sub-matrices of the
// step's operands, handed to the GemmRunner with pointers offset to the
// group's rows or columns; column ranges carry the whole row as their row
// stride (GemmPointers::aRowStride / bRowStride), which becomes cuBLASLt's
// leading dimension. The runner caches a problem per group shape, so a
// sequence of calls with varying m_splits asks the heuristic once per size
// it meets.
//
//===----------------------------------------------------------------------===//
#include "runtime/GroupedGemm.h"

#include "runtime/HostArguments.h"

#include "dialects/GroupedBlockScaleLayout.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <mutex>

#include "GroupedBiasPtx.inc"

using namespace tejit::runtime;
using llvm::Error;
using llvm::Expected;
using Form = GroupedGemmStep::Form;

namespace {
Error planError(const GroupedGemmStep &step, const llvm::Twine &why) {
  return makeError(ErrorCode::InvalidArgument,
                   "grouped_gemm (" + groupedFormName(step.form) + "): " + why);
}

const char *byteAt(const void *base, int64_t bytes) {
  return static_cast<const char *>(base) + bytes;
}

/// Enqueues tejit_grouped_bias_rows on `stream`: out row t < o_G (`out`'s
/// rows of `rowBytes` bytes, o_g from `splits`) becomes bias row g(t)
/// (`bias`, [G, rowBytes]), one launch per GroupedBiasRowsParams::kMaxGroups
/// groups (none for groups owning no rows), each passing its groups' row
/// ends by value: a graph node under capture, replaying these splits.
Error launchBiasRows(const CudaDriver &driver, CUfunction kernel,
                     llvm::ArrayRef<int32_t> splits, CUdeviceptr out,
                     CUdeviceptr bias, int64_t rowBytes, CUstream stream) {
  using Params = GroupedBiasRowsParams;
  // Bandwidth bound: the widest stores (up to 16 bytes) that every row of
  // both tensors allows.
  int64_t vectorBytes = 16;
  while (vectorBytes > 1 &&
         (rowBytes % vectorBytes != 0 || out % CUdeviceptr(vectorBytes) != 0 ||
          bias % CUdeviceptr(vectorBytes) != 0))
    vectorBytes /= 2;
  // A block per row at a time (grid-stride), its threads over the row's
  // vectors; enough blocks to fill an H200 several times over.
  int64_t vectors = rowBytes / vectorBytes;
  unsigned threads =
      unsigned(std::clamp<int64_t>((vectors + 31) / 32 * 32, 32, 256));
  constexpr int64_t maxBlocks = 2048;
  int64_t first = 0; // o of the launch's first group
  for (size_t start = 0; start < splits.size(); start += Params::kMaxGroups) {
    Params params;
    params.groups =
        std::min<int64_t>(Params::kMaxGroups, int64_t(splits.size() - start));
    int64_t rows = 0;
    for (int64_t i = 0; i < params.groups; ++i) {
      rows += splits[start + size_t(i)];
      params.ends[i] = rows;
    }
    if (rows && rowBytes) {
      params.out = out + CUdeviceptr(first * rowBytes);
      params.bias = bias + CUdeviceptr(int64_t(start) * rowBytes);
      params.rows = rows;
      params.rowBytes = rowBytes;
      params.vectorBytes = vectorBytes;
      void *arguments[] = {&params};
      if (Error error = driver.check(
              driver.cuLaunchKernel(kernel, unsigned(std::min(rows, maxBlocks)),
                                    1, 1, threads, 1, 1, 0, stream, arguments,
                                    nullptr),
              "writing a block-scaled grouped GEMM's output rows with its "
              "bias (tejit_grouped_bias_rows)"))
        return error;
    }
    first += rows;
  }
  return Error::success();
}

/// The bias rows kernel's function per context (see biasRowsKernel).
struct BiasRowsKernels {
  std::mutex mutex;
  std::vector<std::pair<CUcontext, CUfunction>> loaded;
};
BiasRowsKernels &biasRowsKernels() {
  static BiasRowsKernels kernels;
  return kernels;
}
} // namespace

llvm::Expected<GroupedGemm> GroupedGemm::create(const GroupedGemmStep &step,
                                                const FunctionPlan &function) {
  GroupedGemm grouped(step);
  const std::vector<int64_t> &a = step.aType.shape, &b = step.bType.shape,
                             &out = step.outType.shape;
  int64_t g = step.groups;
  if (g < 1)
    return planError(step, "needs at least one group");
  bool transposeA = !step.fp8 && step.transposeA;
  bool transposeB = step.fp8 || step.transposeB;
  if (a.size() != 2)
    return planError(step, "a must be a matrix");
  int64_t tokens = step.tokens();
  if (step.form == Form::Rows) {
    if (transposeA)
      return planError(step, "a is [T, K] in the rows form (no transpose_a)");
    grouped.k = a[1];
    if (b.size() != 3 || b[0] != g || b[transposeB ? 2 : 1] != grouped.k)
      return planError(step, "b must be [G, N, K] (transposed) or [G, K, N]");
    grouped.n = b[transposeB ? 1 : 2];
    if (out != std::vector<int64_t>{tokens, grouped.n})
      return planError(step, "out must be [T, N]");
  } else {
    grouped.m = transposeA ? a[1] : a[0];
    if (b.size() != 2 || b[transposeB ? 1 : 0] != tokens)
      return planError(step, "b must be [N, T] (transposed) or [T, N]");
    grouped.n = transposeB ? b[0] : b[1];
    if (out != std::vector<int64_t>{g, grouped.m, grouped.n})
      return planError(step, "out must be [G, M, N]");
    if (step.bias)
      return planError(step, "only the rows form adds a bias");
  }
  if (step.fp8 && (!step.aScaleInv || !step.bScaleInv))
    return planError(step, "an FP8 grouped GEMM needs a_scale_inv and "
                           "b_scale_inv");
  if (step.bias &&
      (*step.bias < 0 || size_t(*step.bias) >= function.values.size()))
    return planError(step, "the bias is not a value of the function");
  std::optional<ElementType> biasElement;
  if (step.bias)
    biasElement = function.values[*step.bias].type.element;
  if (std::optional<std::pair<llvm::StringRef, std::string>> problem =
          groupedScalingProblem(step, biasElement))
    return planError(step, "'" + problem->first + "' " + problem->second);
  if (step.bias) {
    const TensorType &type = function.values[*step.bias].type;
    if (type.shape != std::vector<int64_t>{g, grouped.n})
      return planError(step, "the bias must be [G, N]");
    grouped.biasElement = type.element;
    if (step.blockScaled()) {
      // No bias epilogue with block scales: run() writes the group's out
      // rows with its bias row and the GEMM adds them as C, out's type
      // (groupedScalingProblem).
      ValueInfo filled;
      filled.type = TensorType{{0, grouped.n}, type.element};
      grouped.biasFilledValue = int64_t(grouped.groupValues.values.size());
      grouped.groupValues.values.push_back(filled);
    } else {
      // The runner reads a group's bias row type off this value.
      ValueInfo row;
      row.type = TensorType{{grouped.n}, type.element};
      row.bytes = row.type.bytes();
      grouped.biasRowValue = int64_t(grouped.groupValues.values.size());
      grouped.groupValues.values.push_back(row);
    }
  }
  if (step.accumulate) {
    if (step.form == Form::Rows)
      return planError(step, "only the contraction form accumulates");
    if (*step.accumulate < 0 ||
        size_t(*step.accumulate) >= function.values.size())
      return planError(step, "accumulate is not a value of the function");
    const TensorType &type = function.values[*step.accumulate].type;
    if (type.shape != out || type.element != step.outType.element)
      return planError(step, "accumulate must have out's type");
    ValueInfo product;
    product.type = TensorType{{grouped.m, grouped.n}, type.element};
    product.bytes = product.type.bytes();
    grouped.accumulateValue = int64_t(grouped.groupValues.values.size());
    grouped.groupValues.values.push_back(product);
  }
  grouped.groupValues.name = "grouped_gemm";
  return grouped;
}

Expected<CUfunction> GroupedGemm::biasRowsKernel(const CudaDriver &driver) {
  CUcontext context = nullptr;
  if (Error error = driver.check(driver.cuCtxGetCurrent(&context),
                                 "finding the current CUDA context"))
    return std::move(error);
  BiasRowsKernels &kernels = biasRowsKernels();
  std::lock_guard<std::mutex> lock(kernels.mutex);
  for (const auto &[loadedIn, function] : kernels.loaded)
    if (loadedIn == context)
      return function;
  CUmodule module;
  if (Error error =
          driver.check(driver.cuModuleLoadData(&module, tejitGroupedBiasPtx),
                       "loading the grouped GEMM bias rows kernel (PTX)"))
    return std::move(error);
  CUfunction function;
  if (Error error = driver.check(
          driver.cuModuleGetFunction(&function, module,
                                     "tejit_grouped_bias_rows"),
          "finding the runtime helper kernel 'tejit_grouped_bias_rows'")) {
    driver.cuModuleUnload(module);
    return std::move(error);
  }
  kernels.loaded.emplace_back(context, function);
  return function;
}

const char *tejit::runtime::groupedBiasPtx() { return tejitGroupedBiasPtx; }

Error GroupedGemm::checkGroupOut(const GroupedGemmStep &step,
                                 llvm::ArrayRef<CUdeviceptr> groupOut) {
  if (groupOut.empty())
    return Error::success();
  if (step.form != Form::Contraction || !step.accumulate)
    return planError(step, "only a contraction that accumulates takes "
                           "per-group output pointers");
  if (int64_t(groupOut.size()) != step.groups)
    return planError(step, llvm::formatv("{0} per-group output pointers for "
                                         "{1} groups",
                                         groupOut.size(), step.groups));
  if (llvm::is_contained(groupOut, CUdeviceptr(0)))
    return planError(step, "a per-group output pointer is null");
  return Error::success();
}

int64_t GroupedGemm::blockScaleOffsetAt(const GroupedGemmStep &step,
                                        bool operandB, int64_t group,
                                        int64_t rowsBefore,
                                        int64_t blocksBefore) {
  namespace layout = tejit::groupedblockscale;
  const std::vector<int64_t> &shape =
      operandB ? step.bType.shape : step.aType.shape;
  // Contraction: a [M, T] and b [N, T], cast transposed in token segments.
  if (step.form == Form::Contraction)
    return layout::transposedSegmentsOffsetAfter(blocksBefore, shape[0]);
  // Rows: b [G, N, K], one te.block_quantize per group.
  if (operandB)
    return layout::stackedOffset(group, shape[1], shape[2],
                                 step.bScaling == GemmScaling::Block1D ? 1 : 2);
  // Rows: a [T, K] in row segments.
  return layout::segmentsOffsetAfter(rowsBefore, shape[1]);
}

int64_t GroupedGemm::blockScaleOffset(const GroupedGemmStep &step,
                                      bool operandB,
                                      llvm::ArrayRef<int32_t> splits,
                                      int64_t group) {
  int64_t rowsBefore = 0, blocksBefore = 0;
  for (int32_t size : splits.take_front(group)) {
    rowsBefore += size;
    blocksBefore += tejit::groupedblockscale::transposedSegmentBlocks(size);
  }
  return blockScaleOffsetAt(step, operandB, group, rowsBefore, blocksBefore);
}

Expected<std::vector<std::array<int64_t, 2>>>
GroupedGemm::blockScaleOffsets(llvm::ArrayRef<int32_t> splits,
                               const GroupedGemmPointers &pointers) const {
  const GroupedGemmStep &step = grouped;
  // cuBLASLt reads block scales in place: each group's pointer must be
  // 16-byte aligned, as the base is when the arena or cuMemAlloc placed it.
  for (auto [name, base] : {std::pair{"a_scale_inv", pointers.aScaleInv},
                            std::pair{"b_scale_inv", pointers.bScaleInv}})
    if (reinterpret_cast<uintptr_t>(base) % 16 != 0)
      return planError(step, llvm::formatv("the block scales {0} at {1} are "
                                           "not 16-byte aligned, which "
                                           "cuBLASLt needs (they are read in "
                                           "place)",
                                           name, base));
  std::vector<std::array<int64_t, 2>> offsets;
  offsets.reserve(splits.size());
  // Running sums of the segments before group g: O(G) per run.
  int64_t rowsBefore = 0, blocksBefore = 0;
  for (int64_t g = 0; g < step.groups; ++g) {
    std::array<int64_t, 2> offset = {
        blockScaleOffsetAt(step, false, g, rowsBefore, blocksBefore),
        blockScaleOffsetAt(step, true, g, rowsBefore, blocksBefore)};
    rowsBefore += splits[g];
    blocksBefore +=
        tejit::groupedblockscale::transposedSegmentBlocks(splits[g]);
    // The layouts make every offset a multiple of 4 floats when each m_g is
    // a multiple of 16 (checkSplits): this only fails on a layout bug.
    for (auto [name, elements] :
         {std::pair{"a_scale_inv", offset[0]}, {"b_scale_inv", offset[1]}})
      if (elements % 4 != 0)
        return makeError(
            ErrorCode::Internal,
            llvm::formatv("grouped_gemm ({0}): group {1}'s {2} starts {3} "
                          "floats into the tensor, not at a 16-byte offset "
                          "(dialects/GroupedBlockScaleLayout.h)",
                          groupedFormName(step.form), g, name, elements));
    offsets.push_back(offset);
  }
  return offsets;
}

Error GroupedGemm::run(GemmRunner &gemms, llvm::ArrayRef<int32_t> splits,
                       const GroupedGemmPointers &pointers, CUstream stream,
                       const CudaDriver &driver, GemmLanes *lanes) const {
  const GroupedGemmStep &step = grouped;
  if (int64_t(splits.size()) != step.groups)
    return planError(step, llvm::formatv("m_splits has {0} values for {1} "
                                         "groups",
                                         splits.size(), step.groups));
  int64_t tokens = step.tokens();
  if (Error error = checkSplits(splits, tokens, step.fp8, "grouped_gemm"))
    return error;
  bool perGroup = !pointers.groupOut.empty();
  if (Error error = checkGroupOut(step, pointers.groupOut))
    return error;
  if (!pointers.a || !pointers.b ||
      (!perGroup &&
       (!pointers.out || (step.accumulate && !pointers.accumulate))) ||
      (step.fp8 && (!pointers.aScaleInv || !pointers.bScaleInv)) ||
      (step.bias && !pointers.bias))
    return planError(step, "a device pointer is null");
  // Block scales: every group's offsets, checked before anything is issued.
  bool blocks = step.blockScaled();
  std::vector<std::array<int64_t, 2>> scaleOffsets;
  if (blocks) {
    Expected<std::vector<std::array<int64_t, 2>>> offsets =
        blockScaleOffsets(splits, pointers);
    if (!offsets)
      return offsets.takeError();
    scaleOffsets = std::move(*offsets);
  }

  int64_t aBytes = elementBytes(step.aType.element),
          bBytes = elementBytes(step.bType.element),
          outBytes = elementBytes(step.outType.element);
  bool rows = step.form == Form::Rows;
  bool transposeA = !step.fp8 && step.transposeA;
  bool transposeB = step.fp8 || step.transposeB;

  // What no group writes: the padding rows (rows form), the products of
  // empty groups (contraction form).
  int64_t used = 0;
  for (int32_t size : splits)
    used += size;
  auto zero = [&](int64_t offset, int64_t bytes) -> Error {
    if (!bytes)
      return Error::success();
    return driver.check(
        driver.cuMemsetD8Async(reinterpret_cast<CUdeviceptr>(pointers.out) +
                                   CUdeviceptr(offset),
                               0, size_t(bytes), stream),
        "zeroing what no group of a grouped GEMM writes");
  };
  if (rows) {
    if (Error error = zero(used * n * outBytes, (tokens - used) * n * outBytes))
      return error;
  } else {
    // An empty group's product is 0: out[g] is 0, or accumulate[g] (left
    // as it is when accumulating in place).
    for (auto [group, size] : llvm::enumerate(splits)) {
      // Per-group matrices are accumulated in place: an empty group's stays.
      if (size != 0 || perGroup)
        continue;
      int64_t offset = int64_t(group) * m * n * outBytes;
      if (!step.accumulate) {
        if (Error error = zero(offset, m * n * outBytes))
          return error;
      } else if (pointers.accumulate != pointers.out) {
        if (Error error = driver.check(
                driver.cuMemcpyDtoDAsync(
                    reinterpret_cast<CUdeviceptr>(pointers.out) +
                        CUdeviceptr(offset),
                    reinterpret_cast<CUdeviceptr>(pointers.accumulate) +
                        CUdeviceptr(offset),
                    size_t(m * n * outBytes), stream),
                "copying an empty group's accumulated product"))
          return error;
      }
    }
  }

  // Each group as a plan GEMM: the types' shapes change per group.
  GemmStep gemm;
  gemm.aType.element = step.aType.element;
  gemm.bType.element = step.bType.element;
  gemm.outType.element = step.outType.element;
  gemm.scaled = step.fp8;
  // Block-scaled GEMMs accumulate without fast accumulation (create()
  // refuses a step asking for it); the problem cache and the size classes'
  // algorithms are keyed on the scalings (Gemm.cpp's ProblemKey).
  gemm.fastAccum = step.fp8 && !blocks && step.fastAccum;
  if (blocks) {
    gemm.aScaling = step.aScaling;
    gemm.bScaling = step.bScaling;
  }
  gemm.transposeA = transposeA;
  gemm.transposeB = !step.fp8 && transposeB;
  if (step.fp8) {
    gemm.aScaleInv = 0;
    gemm.bScaleInv = 0;
  }
  // A block-scaled rows step's bias: C = the group's out rows, written with
  // the bias before the GEMMs (launchBiasRows, below), beta = 1; their
  // [m_g, N] type is set per group in a copy of groupValues (the runner
  // checks it).
  bool fillBias = biasFilledValue.has_value();
  gemm.epilogue.bias = biasRowValue;
  gemm.epilogue.residual =
      fillBias ? biasFilledValue : accumulateValue; // C, beta = 1
  gemm.sizesVary = true; // an algorithm per size class, not per size
  FunctionPlan filledValues;
  if (fillBias)
    filledValues = groupValues;
  const FunctionPlan &function = fillBias ? filledValues : groupValues;

  // FP8 per tensor: every group's scale_inv pair into aligned slots, two
  // copies. (Block scales are read in place.)
  const void *aScales = pointers.aScaleInv, *bScales = pointers.bScaleInv;
  int64_t scaleStride = 4;
  if (step.fp8 && !blocks && pointers.scaleSlots) {
    auto *slots = static_cast<char *>(pointers.scaleSlots);
    for (auto [from, to] :
         {std::pair{pointers.aScaleInv, slots},
          std::pair{pointers.bScaleInv, slots + 16 * step.groups}}) {
      CUDA_MEMCPY2D copy = {};
      copy.srcMemoryType = CU_MEMORYTYPE_DEVICE;
      copy.srcDevice = reinterpret_cast<CUdeviceptr>(from);
      copy.srcPitch = 4;
      copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
      copy.dstDevice = reinterpret_cast<CUdeviceptr>(to);
      copy.dstPitch = 16;
      copy.WidthInBytes = 4;
      copy.Height = size_t(step.groups);
      if (Error error =
              driver.check(driver.cuMemcpy2DAsync(&copy, stream),
                           "staging a grouped GEMM's scale_inv values"))
        return error;
    }
    aScales = slots;
    bScales = slots + 16 * step.groups;
    scaleStride = 16;
  }

  // A block-scaled rows step's bias: every group's out rows written with
  // its bias row in one launch on `stream` (per kMaxGroups groups), before
  // the fork, which orders it before every lane's GEMM.
  if (fillBias && used) {
    Expected<CUfunction> kernel =
        biasRows ? Expected<CUfunction>(biasRows) : biasRowsKernel(driver);
    if (!kernel)
      return kernel.takeError();
    if (Error error = launchBiasRows(
            driver, *kernel, splits,
            reinterpret_cast<CUdeviceptr>(pointers.out),
            reinterpret_cast<CUdeviceptr>(pointers.bias), n * outBytes, stream))
      return error;
  }

  // Small groups run concurrently on the lanes (after the zeroing and the
  // scale staging above, which the fork orders before them).
  int64_t nonEmpty = llvm::count_if(splits, [](int32_t size) { return size; });
  // rows: M = m_g, K fixed; contraction: M, N fixed, K = m_g.
  double flopsPerGroup = nonEmpty ? 2.0 * double(used) / double(nonEmpty) *
                                        double(n) * double(rows ? k : m)
                                  : 0.0;
  bool useLanes =
      lanes && lanes->size() > 1 && nonEmpty > 1 && flopsPerGroup < kLaneFlops;
  std::unique_lock<std::mutex> laneLock;
  if (useLanes) {
    laneLock = std::unique_lock<std::mutex>(lanes->mutex);
    if (Error error = lanes->fork(stream))
      return error;
  }
  Error failed = Error::success();
  size_t lane = 0;

  int64_t offset = 0; // o_g
  for (auto [index, size] : llvm::enumerate(splits)) {
    int64_t g = int64_t(index), mg = size;
    int64_t o = offset;
    offset += mg;
    if (mg == 0)
      continue;
    GemmPointers group;
    if (blocks) {
      // The group's sub-matrices' scales, laid out as BlockScaleLayout.h
      // lays out those of one matrix.
      group.aScaleInv = byteAt(aScales, 4 * scaleOffsets[index][0]);
      group.bScaleInv = byteAt(bScales, 4 * scaleOffsets[index][1]);
    } else if (step.fp8) {
      group.aScaleInv = byteAt(aScales, g * scaleStride);
      group.bScaleInv = byteAt(bScales, g * scaleStride);
    }
    if (rows) {
      // a [T, K] rows [o, o + m_g); b[g]; out rows [o, o + m_g).
      const std::vector<int64_t> &b = step.bType.shape;
      gemm.aType.shape = {mg, k};
      gemm.bType.shape = {b[1], b[2]};
      gemm.outType.shape = {mg, n};
      group.a = byteAt(pointers.a, o * k * aBytes);
      group.b = byteAt(pointers.b, g * b[1] * b[2] * bBytes);
      group.out = const_cast<char *>(byteAt(pointers.out, o * n * outBytes));
      if (fillBias) {
        TensorType &filled = filledValues.values[*biasFilledValue].type;
        filled.shape = {mg, n};
        filledValues.values[*biasFilledValue].bytes = filled.bytes();
        group.residual = group.out; // in place, as launchBiasRows left it
      } else if (step.bias) {
        int64_t biasBytes = elementBytes(biasElement);
        group.bias = byteAt(pointers.bias, g * n * biasBytes);
      }
    } else {
      // K = m_g: the segment's rows of a [T, .] operand, or its columns of
      // a [., T] one (row stride T).
      gemm.aType.shape = transposeA ? std::vector<int64_t>{mg, m}
                                    : std::vector<int64_t>{m, mg};
      gemm.bType.shape = transposeB ? std::vector<int64_t>{n, mg}
                                    : std::vector<int64_t>{mg, n};
      gemm.outType.shape = {m, n};
      group.a = byteAt(pointers.a, (transposeA ? o * m : o) * aBytes);
      group.aRowStride = transposeA ? 0 : tokens;
      group.b = byteAt(pointers.b, (transposeB ? o : o * n) * bBytes);
      group.bRowStride = transposeB ? tokens : 0;
      if (perGroup) {
        group.out = reinterpret_cast<void *>(pointers.groupOut[g]);
        group.residual = group.out;
      } else {
        group.out =
            const_cast<char *>(byteAt(pointers.out, g * m * n * outBytes));
        if (step.accumulate)
          group.residual = byteAt(pointers.accumulate, g * m * n * outBytes);
      }
    }
    GemmRunner &runner = useLanes ? lanes->runner(lane) : gemms;
    CUstream groupStream = useLanes ? lanes->stream(lane) : stream;
    if (useLanes)
      lane = (lane + 1) % lanes->size();
    if (Error error = runner.run(gemm, function, group, groupStream)) {
      llvm::consumeError(std::move(failed)); // success so far
      failed = annotate(std::move(error),
                        llvm::formatv("grouped_gemm ({0}), group {1} of {2} "
                                      "(m_splits[{1}] = {3})",
                                      groupedFormName(step.form), g,
                                      step.groups, mg),
                        ErrorCode::Cublas);
      break;
    }
  }
  // Joined also after a failure: the caller's stream must not run ahead of
  // what the lanes enqueued.
  if (useLanes)
    if (Error error = lanes->join(stream))
      return llvm::joinErrors(std::move(failed), std::move(error));
  return failed;
}
