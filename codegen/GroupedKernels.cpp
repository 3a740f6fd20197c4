//===- GroupedKernels.cpp - GroupedLinear's per-group casts and sums ------===//
//
// The kernels of docs/grouped-linear.md's grouped ops. Groups are the row
// segments of a [T, K] matrix (`m_splits`, a device `const int *` of G
// sizes known only at run time: each block finds the offsets it needs,
// grouped.cuh) or the slices of a stacked [G, R, C] tensor (a [G * R, C]
// matrix whose group of row t is t / R). Rows at and past o_G = sum(m) are
// padding: written as 0 and read by no amax or sum.
//
// te.grouped_quantize and te.grouped_amax ("grouped_quantize" and
// "grouped_amax" kernels): 256 threads take a tile of 128 rows x 8 vectors
// of 16 bytes of the input (the cast-transpose kernels' layout,
// PointwiseKernels.cpp), loaded into registers before anything else, so one
// read of the input serves the row-major cast, the transposed cast and the
// amax. A tile may straddle segments: each row finds its segment by a
// binary search of the segment ends in shared memory and is cast with that
// segment's scale (te.quantize's float32 product and saturating
// round-to-nearest-even cvt). Transposed casts ([K, T], or [G, C, R] for
// stacked input) go through a shared byte tile, 8 rows x 4 columns a thread
// (tj_transpose_8x4), so that each output row leaves in whole sectors.
// Amaxes are unsigned maxima of |x|'s bits (exact, NaN kept, as the
// interpreter's absMax and the block casts), kept per thread while its rows
// stay in one segment, met per segment in shared memory and folded into the
// [G] output by one atomicMax a segment a block (the launcher zeroes the
// amaxes first).
//
// te.grouped_bias_grad ("grouped_bias_grad"): block (segment g, column
// strip, split s) sums split s of segment g's rows in float32, its threads'
// sums meeting in shared memory in a fixed order; with several splits the
// partial sums meet in the scratch and the strip's last block adds them in
// split order (writeLastBlockOfStrip): the same bits on every run. An empty
// segment's sums are 0.
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"

#include "dialects/TEDialect.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::te;
using namespace tejit::codegen;
using llvm::formatv;

namespace {

constexpr int64_t kThreads = 256, kThreadsX = 8,
                  kRowsPerPass = kThreads / kThreadsX, kPasses = 4,
                  kTileRows = kRowsPerPass * kPasses;
/// Grid rows are limited to 65535.
constexpr int64_t kMaxGridY = 65535;

/// The groups of a grouped cast's input.
struct GroupedInput {
  Value input, mSplits;
  /// G; rows (T, or G * R) and columns (K, or C) of the input as a matrix;
  /// R for stacked input (0 with m_splits).
  int64_t groups = 0, rows = 0, cols = 0, groupRows = 0;
  std::string type;
};

/// One te.grouped_quantize of the kernel: its scale, and the outputs it
/// writes (empty names for those the kernel does not write).
struct GroupedCast {
  bool transpose = false;
  std::string out, scale, fp8Type;
  /// The shared copy of its scales (casts with one scale share it).
  std::string scales;
};

/// Reads the input's shape; fails on what the kernels do not take.
llvm::Error describeInput(const KernelGroup &group, Value input, Value mSplits,
                          GroupedInput &in) {
  if (!llvm::is_contained(group.inputs, input) ||
      (mSplits && !llvm::is_contained(group.inputs, mSplits)))
    return noEmitter(group.op, "a grouped op on a value computed in the "
                               "kernel");
  auto type = tensorType(input);
  Type element = type.getElementType();
  if (!(element.isBF16() || element.isF16() || element.isF32()))
    return noEmitter(group.op, "a grouped op on other than bf16, f16 or f32");
  in.input = input;
  in.mSplits = mSplits;
  in.type = elementTypeName(element);
  if (mSplits) {
    if (type.getRank() != 2)
      return noEmitter(group.op, "row segments of other than a matrix");
    in.groups = tensorType(mSplits).getDimSize(0);
  } else {
    if (type.getRank() != 3)
      return noEmitter(group.op, "stacked groups of other than [G, R, C]");
    in.groups = type.getDimSize(0);
    in.groupRows = type.getDimSize(1);
  }
  in.rows = rowsOf(input);
  in.cols = colsOf(input);
  if (in.rows <= 0 || in.cols <= 0 || in.groups <= 0)
    return noEmitter(group.op, "an empty input");
  return llvm::Error::success();
}

/// Declares the segment ends (m_splits) and starts computing them; the
/// caller synchronizes before the first tj_segment_of.
void writeSegmentEnds(CudaWriter &w, KernelBuilder &builder,
                      const GroupedInput &in) {
  if (!in.mSplits)
    return;
  w.line("__shared__ int seg_end[kGroups];  // o_1 .. o_G");
  w.line("tj_segment_ends(" + builder.param(in.mSplits).str() +
         ", seg_end, kGroups);");
}

/// `const int g = ...`: the group of row `row` (kGroups for padding and
/// for rows past the input).
std::string groupOfRow(const GroupedInput &in) {
  if (in.mSplits)
    return "const int g = tj_segment_of(seg_end, kGroups, row);";
  return "const int g = row < kRows ? static_cast<int>(row / kGroupRows) : "
         "kGroups;";
}

/// The element offset of input element (row, col) in a transposed output:
/// [K, T] for segments, [G, C, R] for stacked groups.
std::string transposedIndex(const GroupedInput &in, llvm::StringRef row,
                            llvm::StringRef col) {
  if (in.mSplits)
    return formatv("({1}) * kRows + ({0})", row, col).str();
  return formatv("(({0}) / kGroupRows * kCols + ({1})) * kGroupRows + ({0}) "
                 "% kGroupRows",
                 row, col)
      .str();
}

/// The kernel of te.grouped_quantize casts of one input (and their amaxes)
/// or of te.grouped_amax; `amaxes` are the [G] outputs that get max |x|.
EmittedKernel writeGroupedCast(KernelBuilder &builder, const GroupedInput &in,
                               ArrayRef<GroupedCast> casts,
                               ArrayRef<std::string> amaxes) {
  int64_t vec = vectorWidth(
      {in.cols}, elementBytes(tensorType(in.input).getElementType()));
  int64_t tileCols = kThreadsX * vec;
  bool exact = in.rows % kTileRows == 0 && in.cols % tileCols == 0;
  bool narrow = in.rows * in.cols < (int64_t(1) << 31);
  bool anyTranspose = llvm::any_of(casts, [](const GroupedCast &c) {
    return c.transpose && !c.out.empty();
  });
  // Transposed bytes leave 8 rows x 4 columns a thread where each 8-row run
  // is contiguous and 8-byte aligned in the output and the tile's rows are
  // whole words; else one byte a thread.
  int64_t runRows = in.mSplits ? in.rows : in.groupRows;
  bool wide = vec % 4 == 0 && runRows % 8 == 0;

  CudaWriter w;
  builder.writeSignature(w, kThreads);
  w.line(std::string("using Index = ") + (narrow ? "int;" : "tj_i64;"));
  w.line(formatv("constexpr int kVec = {0}, kThreadsX = {1}, kRowsPerPass = "
                 "{2}, kPasses = {3}, kTileRows = {4}, kTileCols = {5};",
                 vec, kThreadsX, kRowsPerPass, kPasses, kTileRows, tileCols)
             .str());
  w.line(formatv("constexpr int kGroups = {0};", in.groups).str());
  w.line(formatv("[[maybe_unused]] constexpr Index kRows = {0}, kCols = {1}, "
                 "kGroupRows = {2};",
                 in.rows, in.cols, std::max<int64_t>(in.groupRows, 1))
             .str());
  w.line(formatv("constexpr bool kExact = {0};  // whole tiles: no bounds "
                 "checks",
                 exact ? "true" : "false")
             .str());
  w.line("const int tx = threadIdx.x % kThreadsX, ty = threadIdx.x / "
         "kThreadsX;");
  w.line("const Index row0 = static_cast<Index>(blockIdx.y) * kTileRows, "
         "col0 = static_cast<Index>(blockIdx.x) * kTileCols;");
  w.line("const Index col = col0 + tx * kVec;");
  // The loads go out first: they need no segment.
  w.line(formatv("tj_vec<{0}, kVec> x_in[kPasses];", in.type).str());
  w.line("#pragma unroll");
  w.open("for (int p = 0; p < kPasses; ++p)");
  w.line("const Index row = row0 + ty + p * kRowsPerPass;");
  w.line(formatv("if (kExact || (row < kRows && col < kCols)) x_in[p] = "
                 "*reinterpret_cast<const tj_vec<{0}, kVec> *>({1} + row * "
                 "kCols + col);",
                 in.type, builder.param(in.input))
             .str());
  w.line("else x_in[p] = {};");
  w.close();

  // Per-group state in shared memory: segment ends, scales, amaxes.
  writeSegmentEnds(w, builder, in);
  // Casts with one scale share its copy (emitGroupedCast names them so).
  llvm::StringSet<> scaleCopies;
  for (const GroupedCast &cast : casts)
    if (scaleCopies.insert(cast.scales).second)
      w.line("__shared__ float " + cast.scales + "[kGroups];");
  if (!amaxes.empty())
    w.line("__shared__ tj_u32 amax_s[kGroups];");
  if (!casts.empty() || !amaxes.empty()) {
    w.open("for (int i = threadIdx.x; i < kGroups; i += blockDim.x)");
    scaleCopies.clear();
    for (const GroupedCast &cast : casts)
      if (scaleCopies.insert(cast.scales).second)
        w.line(cast.scales + "[i] = " + cast.scale + "[i];");
    if (!amaxes.empty())
      w.line("amax_s[i] = 0u;");
    w.close();
  }
  w.line("__syncthreads();");

  for (const GroupedCast &cast : casts)
    if (cast.transpose && !cast.out.empty())
      w.line("__shared__ __align__(16) tj_u8 " + cast.out +
             "_tile[kTileRows][kTileCols + 4];  // +4 bytes a row: no bank "
             "conflicts");
  if (!amaxes.empty()) {
    w.line("// This thread's rows ascend: one running amax while they stay "
           "in a group.");
    w.line("int amax_g = 0;");
    w.line("tj_u32 amax_m = 0u;");
  }
  w.line("#pragma unroll");
  w.open("for (int p = 0; p < kPasses; ++p)");
  w.line("const Index row = row0 + ty + p * kRowsPerPass;");
  w.line(groupOfRow(in));
  w.line("const bool in_group = g < kGroups;  // else padding");
  if (llvm::any_of(casts, [](const GroupedCast &c) { return !c.out.empty(); }))
    w.line("const int g_in = in_group ? g : 0;  // a scale to read");
  if (!amaxes.empty()) {
    w.line("tj_u32 m = 0u;");
    w.line("#pragma unroll");
    w.line("for (int i = 0; i < kVec; ++i) m = tj_max_bits(m, "
           "tj_abs_bits(tj_to_float(x_in[p].v[i])));");
    w.line("if (!in_group) m = 0u;");
    w.open("if (g != amax_g)");
    w.line("if (amax_m != 0u) atomicMax(&amax_s[amax_g], amax_m);");
    w.line("amax_g = g, amax_m = 0u;");
    w.close();
    w.line("amax_m = tj_max_bits(amax_m, m);");
  }
  // The scaled values and FP8 words of each (scale, type), computed once
  // for the row-major and the transposed copy.
  llvm::StringMap<std::string> computed;
  for (const GroupedCast &cast : casts) {
    if (cast.out.empty())
      continue;
    auto [it, first] = computed.try_emplace(cast.scales + " " + cast.fp8Type,
                                            std::to_string(computed.size()));
    std::string y = "y" + it->second, words = "words" + it->second;
    if (first) {
      // Padding rows are 0 whatever they hold (0 * inf would be NaN).
      w.line("float " + y + "[kVec];");
      w.line("#pragma unroll");
      w.line("for (int i = 0; i < kVec; ++i) " + y +
             "[i] = in_group ? tj_to_float(x_in[p].v[i]) * " + cast.scales +
             "[g_in] : 0.f;");
      if (vec % 4 == 0) {
        // Four FP8 elements a word, converted in pairs (te.quantize's cvt).
        w.line("tj_vec<tj_u32, kVec / 4> " + words + ";");
        w.line("tj_pack_words<" + cast.fp8Type + ">(" + words + ", " + y +
               ");");
      }
    }
    std::string tile = cast.out + "_tile";
    if (!cast.transpose) {
      std::string store =
          vec % 4 == 0
              ? "*reinterpret_cast<tj_vec<tj_u32, kVec / 4> *>(" + cast.out +
                    " + row * kCols + col) = " + words + ";"
              : "tj_store(" + cast.out + " + row * kCols + col, " + y + ");";
      w.line("if (kExact || (row < kRows && col < kCols)) " + store);
    } else if (vec % 4 == 0) {
      w.line("#pragma unroll");
      w.line("for (int word = 0; word < kVec / 4; ++word) "
             "*reinterpret_cast<tj_u32 *>(&" +
             tile + "[ty + p * kRowsPerPass][tx * kVec + 4 * word]) = " +
             words + ".v[word];");
    } else {
      w.line("#pragma unroll");
      w.line("for (int i = 0; i < kVec; ++i) " + tile +
             "[ty + p * kRowsPerPass][tx * kVec + i] = tj_convert<" +
             cast.fp8Type + ">::from(" + y + "[i]).bits;");
    }
  }
  w.close();
  if (!amaxes.empty())
    w.line("if (amax_m != 0u) atomicMax(&amax_s[amax_g], amax_m);");

  if (anyTranspose) {
    w.line("__syncthreads();  // the transposed tiles");
    for (const GroupedCast &cast : casts) {
      if (!cast.transpose || cast.out.empty())
        continue;
      std::string tile = cast.out + "_tile";
      if (wide) {
        w.open("for (int task = threadIdx.x; task < kTileRows / 8 * "
               "(kTileCols / 4); task += blockDim.x)");
        w.line("const int r = task % (kTileRows / 8) * 8, c = task / "
               "(kTileRows / 8) * 4;");
        w.open("if (kExact || (row0 + r < kRows && col0 + c < kCols))");
        w.line("tj_u32 lo[4], hi[4];");
        w.line("tj_transpose_8x4(lo, hi, &" + tile + "[r][c], kTileCols + 4);");
        w.line("#pragma unroll");
        w.line("for (int j = 0; j < 4; ++j) *reinterpret_cast<tj_vec<tj_u32, "
               "2> *>(" +
               cast.out + " + " +
               transposedIndex(in, "row0 + r", "col0 + c + j") +
               ") = tj_vec<tj_u32, 2>{{lo[j], hi[j]}};");
        w.close();
        w.close();
      } else {
        w.open("for (int e = threadIdx.x; e < kTileRows * kTileCols; e += "
               "blockDim.x)");
        w.line("const int c = e / kTileRows, r = e % kTileRows;");
        w.line("if (kExact || (row0 + r < kRows && col0 + c < kCols)) " +
               cast.out + "[" + transposedIndex(in, "row0 + r", "col0 + c") +
               "].bits = " + tile + "[r][c];");
        w.close();
      }
    }
  }
  if (!amaxes.empty()) {
    w.line("__syncthreads();  // the block's amaxes");
    w.open("for (int i = threadIdx.x; i < kGroups; i += blockDim.x)");
    w.line("const tj_u32 m = amax_s[i];");
    w.line("if (m == 0u) continue;  // the launcher zeroed the output");
    for (const std::string &amax : amaxes)
      w.line("atomicMax(reinterpret_cast<tj_u32 *>(" + amax + ") + i, m);");
    w.close();
  }
  return builder.finish(w,
                        {llvm::divideCeilSigned(in.cols, tileCols),
                         llvm::divideCeilSigned(in.rows, kTileRows), 1},
                        {kThreads, 1, 1});
}

/// The group's amax outputs of `amax` values, by parameter name.
void addAmax(const KernelGroup &group, KernelBuilder &builder, Value amax,
             SmallVector<std::string> &amaxes) {
  if (group.isOutput(amax))
    amaxes.push_back(builder.param(amax).str());
}

llvm::Error checkGrid(const KernelGroup &group, const GroupedInput &in) {
  if (llvm::divideCeilSigned(in.rows, kTileRows) > kMaxGridY)
    return noEmitter(group.op, "more than 65535 tiles of 128 rows");
  return llvm::Error::success();
}

} // namespace

llvm::Error
tejit::codegen::emitGroupedCast(KernelBuilder &builder,
                                std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  GroupedInput in;
  SmallVector<GroupedCast> casts;
  SmallVector<std::string> amaxes;
  if (group.ops.size() == 1)
    if (auto amax = dyn_cast<GroupedAmaxOp>(group.ops.front())) {
      if (llvm::Error error =
              describeInput(group, amax.getInput(), amax.getMSplits(), in))
        return error;
      if (llvm::Error error = checkGrid(group, in))
        return error;
      addAmax(group, builder, amax.getAmax(), amaxes);
      kernels.push_back(writeGroupedCast(builder, in, casts, amaxes));
      return llvm::Error::success();
    }
  for (Operation *op : group.ops) {
    auto quantize = dyn_cast<GroupedQuantizeOp>(op);
    if (!quantize)
      return noEmitter(group.op, "ops other than te.grouped_quantize");
    if (in.input && (quantize.getInput() != in.input ||
                     quantize.getMSplits() != in.mSplits))
      return noEmitter(group.op, "grouped casts of different inputs or "
                                 "segments");
    if (!in.input)
      if (llvm::Error error = describeInput(group, quantize.getInput(),
                                            quantize.getMSplits(), in))
        return error;
    if (!llvm::is_contained(group.inputs, quantize.getScale()))
      return noEmitter(group.op, "a scale computed in the kernel");
    GroupedCast cast;
    cast.transpose = quantize.getTranspose();
    if (group.isOutput(quantize.getOutput()))
      cast.out = builder.param(quantize.getOutput()).str();
    cast.scale = builder.param(quantize.getScale()).str();
    cast.fp8Type =
        elementTypeName(tensorType(quantize.getOutput()).getElementType());
    cast.scales = "scale_" + cast.scale;
    casts.push_back(std::move(cast));
    addAmax(group, builder, quantize.getAmax(), amaxes);
  }
  if (llvm::Error error = checkGrid(group, in))
    return error;
  kernels.push_back(writeGroupedCast(builder, in, casts, amaxes));
  return llvm::Error::success();
}

llvm::Error
tejit::codegen::emitGroupedBiasGrad(KernelBuilder &builder,
                                    std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  auto op = dyn_cast<GroupedBiasGradOp>(group.ops.front());
  if (!op || group.ops.size() != 1)
    return noEmitter(group.op, "ops other than one te.grouped_bias_grad");
  GroupedInput in;
  if (llvm::Error error =
          describeInput(group, op.getGrad(), op.getMSplits(), in))
    return error;
  if (!group.isOutput(op.getOutput()))
    return noEmitter(group.op, "a bias gradient the kernel does not write");
  Value output = op.getOutput();
  int64_t vec = vectorWidth(
      {in.cols}, elementBytes(tensorType(in.input).getElementType()));
  int64_t tileCols = kThreadsX * vec;
  int64_t strips = llvm::divideCeilSigned(in.cols, tileCols);
  // About four blocks an SM of 132, as the bias gradient of the pointwise
  // kernels, a split taking at least a tile's rows of a segment of T / G.
  constexpr int64_t kTargetBlocks = 4 * 132;
  int64_t perGroup = strips * in.groups;
  int64_t splits = std::clamp<int64_t>(
      (kTargetBlocks + perGroup / 2) / perGroup, 1,
      std::max<int64_t>(
          1, llvm::divideCeilSigned(in.rows, in.groups * kTileRows)));
  splits = std::min(splits, kMaxGridY);
  if (perGroup > (int64_t(1) << 31) - 1)
    return noEmitter(group.op, "too many column strips and groups");
  bool narrow = in.rows * in.cols < (int64_t(1) << 31) &&
                in.groups * splits * in.cols < (int64_t(1) << 31);
  int64_t sumBytes = in.groups * splits * in.cols * 4;
  if (splits > 1)
    builder.requestScratch(sumBytes + perGroup * 4, sumBytes, perGroup * 4);
  std::string out = builder.param(output).str();
  std::string outType = elementTypeName(tensorType(output).getElementType());

  CudaWriter w;
  builder.writeSignature(w, kThreads);
  w.line(std::string("using Index = ") + (narrow ? "int;" : "tj_i64;"));
  w.line(formatv("constexpr int kVec = {0}, kThreadsX = {1}, kRowsPerPass = "
                 "{2}, kUnroll = {3}, kTileCols = {4}, kStrips = {5};",
                 vec, kThreadsX, kRowsPerPass, kPasses, tileCols, strips)
             .str());
  w.line(formatv("constexpr Index kCols = {0};", in.cols).str());
  w.line("const int tx = threadIdx.x % kThreadsX, ty = threadIdx.x / "
         "kThreadsX;");
  w.line("const int g = blockIdx.x / kStrips;");
  w.line("const Index col0 = static_cast<Index>(blockIdx.x % kStrips) * "
         "kTileCols, col = col0 + tx * kVec;");
  w.line("int begin, size;");
  w.line("tj_segment(" + builder.param(in.mSplits).str() +
         ", g, begin, size);");
  w.line("// Split blockIdx.y of the segment's rows.");
  w.line("const Index splits = gridDim.y, split = blockIdx.y;");
  w.line("const Index chunk = (size + splits - 1) / splits;");
  w.line("const Index first = chunk * split, last = chunk * (split + 1);");
  w.line("const Index lo = begin + (first < size ? first : size), hi = begin "
         "+ (last < size ? last : size);");
  w.line("float acc[kVec] = {};");
  w.open("for (Index base = lo; base < hi; base += kRowsPerPass * kUnroll)");
  w.line(formatv("tj_vec<{0}, kVec> v[kUnroll];", in.type).str());
  w.line("#pragma unroll");
  w.open("for (int u = 0; u < kUnroll; ++u)");
  w.line("const Index row = base + ty + u * kRowsPerPass;");
  w.line(formatv("if (row < hi && col < kCols) v[u] = *reinterpret_cast<const "
                 "tj_vec<{0}, kVec> *>({1} + row * kCols + col);",
                 in.type, builder.param(in.input))
             .str());
  w.line("else v[u] = {};");
  w.close();
  w.line("#pragma unroll");
  w.line("for (int u = 0; u < kUnroll; ++u)");
  w.line("#pragma unroll");
  w.line("  for (int i = 0; i < kVec; ++i) acc[i] += tj_to_float(v[u].v[i]);");
  w.close();
  w.line("// The block's rows meet in shared memory, in row order.");
  w.line("__shared__ float acc_rows[kRowsPerPass][kTileCols + 1];");
  w.line("#pragma unroll");
  w.line("for (int i = 0; i < kVec; ++i) acc_rows[ty][tx * kVec + i] = "
         "acc[i];");
  w.line("__syncthreads();");
  w.line("float sum = 0.f;");
  w.line("const Index my_col = col0 + threadIdx.x;");
  w.line("const bool mine = threadIdx.x < kTileCols && my_col < kCols;");
  w.line("if (mine) for (int r = 0; r < kRowsPerPass; ++r) sum += "
         "acc_rows[r][threadIdx.x];");
  if (splits == 1) {
    w.line("if (mine) " + out + "[g * kCols + my_col] = tj_convert<" + outType +
           ">::from(sum);");
  } else {
    w.line("// Partial sums [G][splits][kCols], then the strips' counters.");
    w.line("if (mine) tj_scratch[(static_cast<Index>(g) * gridDim.y + "
           "blockIdx.y) * kCols + my_col] = sum;");
    writeLastBlockOfStrip(
        w, formatv("reinterpret_cast<unsigned *>(tj_scratch + {0})",
                   in.groups * splits * in.cols)
               .str());
    w.line("const volatile float *partials = tj_scratch;");
    w.open("if (mine)");
    w.line("float total = 0.f;");
    w.line("for (unsigned s = 0; s < gridDim.y; ++s) total += "
           "partials[(static_cast<Index>(g) * gridDim.y + s) * kCols + "
           "my_col];");
    w.line(out + "[g * kCols + my_col] = tj_convert<" + outType +
           ">::from(total);");
    w.close();
  }
  kernels.push_back(builder.finish(w, {perGroup, splits, 1}, {kThreads, 1, 1}));
  return llvm::Error::success();
}
