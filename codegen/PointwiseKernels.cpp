//===- PointwiseKernels.cpp - elementwise kernels, casts, transposes ------===//
//
// One family for every group of elementwise ops (bias, activations and
// their gradients, dropout, adds, FP8 casts and dequantizations, amaxes),
// with two layouts:
// - flat: each thread loads kUnroll vectors of kVec elements (16 bytes of
//   bf16) before computing any, so that several loads are in flight;
// - tiled, when the group transposes or reduces over rows: a block owns a
//   column strip of kTileCols and walks tiles of kTileRows rows; transposed
//   FP8 bytes go through a shared tile padded by 4 bytes per row, so the
//   column reads of the transposed write fall in distinct banks; bias
//   gradients sum in registers and once across the block at the end.
// Gated activations split the last dim in halves [a, b]: the iteration
// space is the narrower width and a value twice as wide is read and written
// at `col` and `col + width` ("half" 1).
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"

#include "compiler/interpreter/DropoutRng.h"

#include "dialects/TEDialect.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>

using namespace mlir;
using namespace mlir::te;
using namespace tejit::codegen;
using llvm::formatv;

namespace {

constexpr int64_t kThreads = 256, kUnroll = 4;
/// Tiled layout: 8 threads across a row of the tile, 32 rows per pass, four
/// passes a tile. (The 8192 x 16384 dGELU + cast + transpose kernel on an
/// H200: 128-row tiles 242 us, 64-row tiles 266 us; see
/// benchmarks/gpu/micro/tiled_variants.cu.)
constexpr int64_t kThreadsX = 8, kRowsPerPass = kThreads / kThreadsX,
                  kPasses = 4, kTileRows = kRowsPerPass * kPasses;

/// How a kernel indexes: offsets in 32 bits when every tensor of the group
/// fits (fewer instructions than 64-bit products), and whether the launch
/// covers the iteration space exactly, so that no vector needs a bounds
/// check.
struct Indexing {
  bool narrow = true, exact = false;
  llvm::StringRef type() const { return narrow ? "int" : "tj_i64"; }
};

/// The device code of an activation, as expressions of the operands' code:
/// `f` (a gated activation's first half) and its derivative, and for gated
/// ones what the second half `b` becomes, `g(b)` (b itself, or
/// clamped_swiglu's clamp + offset), and its derivative (none for b
/// itself). clamped_swiglu's parameters are float literals in the code.
struct ActivationCode {
  std::string fName, dfName, args, gName, dgName, gArgs, dgArgs;

  explicit ActivationCode(Operation *op, Activation kind) {
    switch (kind) {
    case Activation::gelu:
    case Activation::geglu:
      fName = "tj_gelu";
      break;
    case Activation::qgelu:
    case Activation::qgeglu:
      fName = "tj_qgelu";
      break;
    case Activation::relu:
    case Activation::reglu:
      fName = "tj_relu";
      break;
    case Activation::srelu:
    case Activation::sreglu:
      fName = "tj_srelu";
      break;
    case Activation::silu:
    case Activation::swiglu:
      fName = "tj_silu";
      break;
    case Activation::clamped_swiglu: {
      ActivationParams params = ActivationParams::of(op);
      std::string limit = floatLiteral(params.limit);
      fName = "tj_clamped_silu";
      args = ", " + limit + ", " + floatLiteral(params.alpha);
      gName = "tj_clamped_linear";
      gArgs = ", " + limit + ", " + floatLiteral(params.offset);
      dgName = "tj_dclamped_linear";
      dgArgs = ", " + limit;
      break;
    }
    }
    dfName = "tj_d" + fName.substr(3);
  }

  std::string f(const std::string &x) const {
    return fName + "(" + x + args + ")";
  }
  std::string df(const std::string &x) const {
    return dfName + "(" + x + args + ")";
  }
  std::string g(const std::string &b) const {
    return gName.empty() ? b : gName + "(" + b + gArgs + ")";
  }
  /// " * g'(b)", or nothing where g'(b) is 1.
  std::string timesDg(const std::string &b) const {
    return dgName.empty() ? "" : " * " + dgName + "(" + b + dgArgs + ")";
  }
};

/// The per-element code of a group for one vector at (row, col).
class PointwiseBody {
public:
  PointwiseBody(KernelBuilder &builder, int64_t width)
      : builder(builder), group(builder.group), width(width) {}

  /// Writes the code of vector `u` (loads already done into `*_in[u]`).
  llvm::Error writeVector(CudaWriter &w);

  /// Kernel-start lines: scalars read once, dropout keys, accumulators.
  std::vector<std::string> prologue;
  /// Register arrays to load: name, pointer expression, element count.
  std::vector<std::pair<std::string, std::string>> loads;
  /// Amax accumulators and the output each one folds into.
  std::vector<std::pair<std::string, std::string>> amaxes;
  /// Bias gradient accumulators: accumulator, output, column offset, type.
  struct ColumnSum {
    std::string acc, output, offset, type;
  };
  std::vector<ColumnSum> columnSums;
  /// Transposed outputs: shared tile, output, column offset, type.
  struct Transposed {
    std::string tile, output, offset, type;
  };
  std::vector<Transposed> transposes;

private:
  std::string at(Value value, int half, CudaWriter &w);
  std::string input(Value value, int half);
  std::string temp(CudaWriter &w, const std::string &expr);
  std::string dropoutKeep(DropoutOp dropout, int half, CudaWriter &w);
  int halves(Value value) const { return colsOf(value) / width; }
  std::string offset(int half) const {
    return half ? " + " + std::to_string(width) : "";
  }
  /// The register array holding (value, half) for a store.
  std::string outArray(Value value, int half, CudaWriter &w);

  KernelBuilder &builder;
  const KernelGroup &group;
  int64_t width;
  std::map<std::pair<void *, int>, std::string> memo, outArrays;
  unsigned temps = 0;
};

std::string PointwiseBody::temp(CudaWriter &w, const std::string &expr) {
  std::string name = "t" + std::to_string(temps++);
  w.line("const float " + name + " = " + expr + ";");
  return name;
}

std::string PointwiseBody::input(Value value, int half) {
  std::string p = builder.param(value).str();
  auto type = tensorType(value);
  if (type.getNumElements() == 1) {
    // A tensor<1xf32> scale: read once per thread.
    std::string name = p + "_v";
    prologue.push_back("const float " + name + " = tj_to_float(" + p + "[0]);");
    return name;
  }
  std::string array = p + (half ? "_hi_in" : "_in");
  std::string pointer =
      type.getRank() == 1
          ? p + " + col" + offset(half)
          : formatv("{0} + row * {1} + col{2}", p, colsOf(value), offset(half))
                .str();
  loads.push_back({array, pointer});
  return array + "[u][i]";
}

std::string PointwiseBody::dropoutKeep(DropoutOp dropout, int half,
                                       CudaWriter &w) {
  // Keyed by the op (no value of its own holds the mask): halves 2 and 3.
  auto key =
      std::make_pair(static_cast<void *>(dropout.getOperation()), half + 2);
  if (memo.count(key))
    return memo[key];
  std::string rng = builder.param(dropout.getRngState()).str();
  std::string keyName = "key" + std::to_string(prologue.size());
  prologue.push_back(
      formatv("const tj_u64 {0} = tj_dropout_key({1}[0], {1}[1], {2}ull);",
              keyName, rng, dropout.getStream())
          .str());
  uint64_t threshold =
      tejit::dropout::keepThreshold(dropout.getRate().convertToDouble());
  int64_t cols = colsOf(dropout.getInput());
  std::string name = "keep" + std::to_string(temps++);
  if (std::optional<uint64_t> group = dropout.getGroup()) {
    // Drop path: whole runs of rows share a draw (the verifier makes the
    // group a multiple of the row length).
    w.line(formatv("const bool {0} = tj_dropout_keeps({1}, static_cast<tj_u64>("
                   "row / {2}), {3}ull);",
                   name, keyName, int64_t(*group) / cols, threshold)
               .str());
    return memo[key] = name;
  }
  // A vector starts at a multiple of kVec, which is even when the width is
  // (the kernel asserts it); with an even row length too, its first flat
  // index is even, elements i and i + 1 (i even) are one pair of the RNG,
  // and the unrolled loop's two identical hashes of a pair fold into one.
  // Otherwise each element hashes its own pair and takes its half.
  if (cols % 2 == 0 && width % 2 == 0) {
    std::string assertion =
        "static_assert(kVec % 2 == 0, \"dropout pairs need even vectors\");";
    if (!llvm::is_contained(prologue, assertion))
      prologue.push_back(assertion);
    w.line(formatv("const unsigned {0}_pair = tj_dropout_keeps2({1}, "
                   "static_cast<tj_u64>(row * {2} + col{3}) / 2 + i / 2, "
                   "{4}ull);",
                   name, keyName, cols, offset(half), threshold)
               .str());
    w.line(formatv("const bool {0} = {0}_pair >> (i & 1) & 1u;", name).str());
  } else {
    w.line(formatv("const bool {0} = tj_dropout_keeps({1}, static_cast<tj_u64>("
                   "row * {2} + col{3} + i), {4}ull);",
                   name, keyName, cols, offset(half), threshold)
               .str());
  }
  return memo[key] = name;
}

std::string PointwiseBody::at(Value value, int half, CudaWriter &w) {
  auto key = std::make_pair(value.getAsOpaquePointer(), half);
  if (auto it = memo.find(key); it != memo.end())
    return it->second;
  std::string expr;
  Operation *op = value.getDefiningOp();
  if (!op || !llvm::is_contained(group.ops, op)) {
    return memo[key] = input(value, half);
  }
  if (auto bias = dyn_cast<BiasAddOp>(op)) {
    expr = at(bias.getInput(), half, w) + " + " + at(bias.getBias(), half, w);
  } else if (auto act = dyn_cast<ActivationOp>(op)) {
    ActivationCode code(act, act.getActivation());
    expr = isGatedActivation(act.getActivation())
               ? code.f(at(act.getInput(), 0, w)) + " * " +
                     code.g(at(act.getInput(), 1, w))
               : code.f(at(act.getInput(), half, w));
  } else if (auto dact = dyn_cast<ActivationGradOp>(op)) {
    ActivationCode code(dact, dact.getActivation());
    if (!isGatedActivation(dact.getActivation()))
      expr = at(dact.getGrad(), half, w) + " * " +
             code.df(at(dact.getInput(), half, w));
    else if (half == 0) // y = f(a) g(b): da = dy f'(a) g(b)
      expr = at(dact.getGrad(), 0, w) + " * " +
             code.df(at(dact.getInput(), 0, w)) + " * " +
             code.g(at(dact.getInput(), 1, w));
    else // db = dy f(a) g'(b)
      expr = at(dact.getGrad(), 0, w) + " * " +
             code.f(at(dact.getInput(), 0, w)) +
             code.timesDg(at(dact.getInput(), 1, w));
  } else if (auto add = dyn_cast<AddOp>(op)) {
    expr = at(add.getLhs(), half, w) + " + " + at(add.getRhs(), half, w);
  } else if (auto dropout = dyn_cast<DropoutOp>(op)) {
    double rate = dropout.getRate().convertToDouble();
    expr = dropoutKeep(dropout, half, w) + " ? " +
           at(dropout.getInput(), half, w) + " * " +
           floatLiteral(1.0 / (1.0 - rate)) + " : 0.f";
  } else if (auto quantize = dyn_cast<QuantizeOp>(op)) {
    // Rounded to float32 first, then to FP8 by the store (as TE).
    expr = at(quantize.getInput(), half, w) + " * " +
           at(quantize.getScale(), 0, w);
  } else if (auto dequantize = dyn_cast<DequantizeOp>(op)) {
    // FP8 widens exactly to float; the product is rounded once, to the
    // output type, by the store (or feeds the next op as a float).
    expr = at(dequantize.getInput(), half, w) + " * " +
           at(dequantize.getScaleInv(), 0, w);
  } else {
    llvm_unreachable("not a per-element value");
  }
  return memo[key] = temp(w, expr);
}

std::string PointwiseBody::outArray(Value value, int half, CudaWriter &w) {
  auto key = std::make_pair(value.getAsOpaquePointer(), half);
  if (auto it = outArrays.find(key); it != outArrays.end())
    return it->second;
  std::string base = group.isOutput(value)
                         ? builder.param(value).str()
                         : "r" + std::to_string(outArrays.size());
  std::string name = base + (half ? "_hi_out" : "_out");
  w.line("float " + name + "[kVec];");
  return outArrays[key] = name;
}

llvm::Error PointwiseBody::writeVector(CudaWriter &w) {
  // What the element loop must produce: stored values, transposed values,
  // amaxes and column sums.
  SmallVector<std::pair<Value, int>> stored, tiles;
  for (Value output : group.outputs) {
    Operation *def = output.getDefiningOp();
    if (!def || isa<TransposeOp, BiasGradOp, AmaxOp>(def) ||
        tensorType(output).getNumElements() == 1 ||
        tensorType(output).getRank() < 2)
      continue;
    for (int h = 0; h < halves(output); ++h)
      stored.push_back({output, h});
  }
  for (Operation *op : group.ops)
    if (auto transpose = dyn_cast<TransposeOp>(op))
      for (int h = 0; h < halves(transpose.getInput()); ++h)
        if (!llvm::is_contained(stored,
                                std::make_pair(Value(transpose.getInput()), h)))
          tiles.push_back({transpose.getInput(), h});
  std::map<std::pair<void *, int>, std::string> arrays;
  for (auto [value, h] : llvm::concat<std::pair<Value, int>>(stored, tiles))
    arrays[{value.getAsOpaquePointer(), h}] = outArray(value, h, w);

  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kVec; ++i)");
  for (Operation *op : group.ops) {
    Value amaxOf, sumOf;
    std::string amaxOut, sumOut;
    if (auto quantize = dyn_cast<QuantizeOp>(op);
        quantize && group.isOutput(quantize.getAmax()))
      amaxOf = quantize.getInput(),
      amaxOut = builder.param(quantize.getAmax()).str();
    if (auto amax = dyn_cast<AmaxOp>(op))
      amaxOf = amax.getInput(), amaxOut = builder.param(amax.getAmax()).str();
    if (amaxOf) {
      std::string acc = "amax" + std::to_string(amaxes.size());
      amaxes.push_back({acc, amaxOut});
      for (int h = 0; h < halves(amaxOf); ++h)
        w.line(acc + " = fmaxf(" + acc + ", fabsf(" + at(amaxOf, h, w) + "));");
    }
    if (auto biasGrad = dyn_cast<BiasGradOp>(op)) {
      Value grad = biasGrad.getGrad();
      if (!group.isOutput(biasGrad.getOutput()))
        return noEmitter(group.op, "a bias gradient the kernel does not write");
      std::string out = builder.param(biasGrad.getOutput()).str();
      for (int h = 0; h < halves(grad); ++h) {
        std::string acc = out + (h ? "_hi_acc" : "_acc");
        columnSums.push_back(
            {acc, out, offset(h),
             elementTypeName(
                 tensorType(biasGrad.getOutput()).getElementType())});
        w.line(acc + "[i] += " + at(grad, h, w) + ";");
      }
    }
  }
  for (auto [value, h] : llvm::concat<std::pair<Value, int>>(stored, tiles))
    w.line(arrays[{value.getAsOpaquePointer(), h}] +
           "[i] = " + at(value, h, w) + ";");
  w.close();
  // FP8 values that are both stored and transposed are converted once.
  std::map<std::pair<void *, int>, std::string> packedArrays;
  for (Operation *op : group.ops) {
    auto transpose = dyn_cast<TransposeOp>(op);
    if (!transpose)
      continue;
    if (!group.isOutput(transpose.getOutput()))
      return noEmitter(group.op, "a transpose the kernel does not write");
    Value in = transpose.getInput();
    if (elementBytes(tensorType(in).getElementType()) != 1)
      return noEmitter(group.op, "a transpose of other than FP8 elements");
    std::string type = elementTypeName(tensorType(in).getElementType());
    std::string out = builder.param(transpose.getOutput()).str();
    for (int h = 0; h < halves(in); ++h) {
      std::string tile = out + (h ? "_hi_tile" : "_tile");
      std::string packed = tile + "_words";
      transposes.push_back({tile, out, offset(h), type});
      packedArrays[{in.getAsOpaquePointer(), h}] = packed;
      w.line(formatv("tj_vec<tj_u32, kVec / 4> {0};", packed).str());
      w.line(formatv("tj_pack_words<{0}>({1}, {2});", type, packed,
                     arrays[{in.getAsOpaquePointer(), h}])
                 .str());
      w.line("#pragma unroll");
      w.line(formatv("for (int word = 0; word < kVec / 4; ++word) "
                     "*reinterpret_cast<tj_u32 *>(&{0}[row - row0][col - col0 "
                     "+ 4 * word]) = {1}.v[word];",
                     tile, packed)
                 .str());
    }
  }
  for (auto [value, h] : stored) {
    std::string at = formatv("{0} + row * {1} + col{2}", builder.param(value),
                             colsOf(value), offset(h));
    auto packed = packedArrays.find({value.getAsOpaquePointer(), h});
    if (packed == packedArrays.end()) {
      w.line(formatv("tj_store({0}, {1});", at,
                     arrays[{value.getAsOpaquePointer(), h}])
                 .str());
      continue;
    }
    w.line(formatv("*reinterpret_cast<tj_vec<tj_u32, kVec / 4> *>({0}) = {1};",
                   at, packed->second)
               .str());
  }
  return llvm::Error::success();
}

/// Whether every tensor the group reads or writes has fewer than 2^31
/// elements, so that 32-bit offsets reach all of them.
bool fitsNarrowIndex(const KernelGroup &group) {
  auto fits = [](Value value) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    return !type || type.getNumElements() < (int64_t(1) << 31);
  };
  if (!llvm::all_of(group.inputs, fits))
    return false;
  for (Operation *op : group.ops)
    if (!llvm::all_of(op->getResults(), fits))
      return false;
  return true;
}

/// The iteration width: the narrowest last dim of the group's matrices
/// (transposed results aside, whose dims are swapped). A group of vectors
/// alone (the te.amax of FP8 attention's q, k and v amaxes, concatenated)
/// iterates over them as one row.
int64_t iterationWidth(const KernelGroup &group, int64_t &rows,
                       int64_t &minBytes, int64_t &maxBytes) {
  int64_t width = INT64_MAX;
  rows = -1;
  minBytes = 16;
  maxBytes = 0;
  auto visit = [&](Value value, bool vectors) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type || type.getElementType().isInteger(64))
      return;
    if (vectors ? type.getRank() != 1 || type.getNumElements() < 2
                : type.getRank() < 2)
      return;
    if (Operation *def = value.getDefiningOp(); def && isa<TransposeOp>(def))
      return;
    width = std::min(width, colsOf(value));
    rows = std::max(rows, rowsOf(value));
    minBytes = std::min(minBytes, elementBytes(type.getElementType()));
    maxBytes = std::max(maxBytes, elementBytes(type.getElementType()));
  };
  for (bool vectors : {false, true}) {
    for (Value input : group.inputs)
      visit(input, vectors);
    for (Operation *op : group.ops)
      for (Value result : op->getResults())
        visit(result, vectors);
    if (width != INT64_MAX)
      break;
  }
  return width;
}

/// The lines every thread runs before its loads: the vector indices it owns.
void writeFlatIndices(CudaWriter &w, Indexing indexing) {
  w.line("Index rows_[kUnroll], cols_[kUnroll];");
  w.line("bool ok_[kUnroll];");
  w.line("#pragma unroll");
  w.open("for (int u = 0; u < kUnroll; ++u)");
  w.line("const Index v = (static_cast<Index>(blockIdx.x) * kUnroll + u) * "
         "blockDim.x + threadIdx.x;");
  w.line(indexing.exact ? "ok_[u] = true;  // the grid covers it exactly"
                        : "ok_[u] = v < kRows * (kCols / kVec);");
  w.line("rows_[u] = v / (kCols / kVec);");
  w.line("cols_[u] = v % (kCols / kVec) * kVec;");
  w.close();
}

void writeTiledIndices(CudaWriter &w, Indexing indexing) {
  w.line("Index rows_[kUnroll], cols_[kUnroll];");
  w.line("bool ok_[kUnroll];");
  w.line("#pragma unroll");
  w.open("for (int u = 0; u < kUnroll; ++u)");
  w.line("rows_[u] = row0 + threadIdx.x / kThreadsX + u * kRowsPerPass;");
  w.line("cols_[u] = col0 + threadIdx.x % kThreadsX * kVec;");
  w.line(indexing.exact ? "ok_[u] = true;  // the tiles cover it exactly"
                        : "ok_[u] = rows_[u] < kRows && cols_[u] < kCols;");
  w.close();
}

/// Loads every register array of `body` for all kUnroll vectors, then runs
/// the compute of each: `compute` holds the code of one vector.
void writeLoadsThenCompute(CudaWriter &w, const PointwiseBody &body,
                           const std::string &compute) {
  for (auto &[array, pointer] : body.loads)
    w.line("float " + array + "[kUnroll][kVec];");
  w.line("// Every load of every vector is issued before the first use.");
  w.line("#pragma unroll");
  w.open("for (int u = 0; u < kUnroll; ++u)");
  w.open("if (ok_[u])");
  // Vectors alone (iterationWidth's one row) read no row.
  w.line("[[maybe_unused]] const Index row = rows_[u], col = cols_[u];");
  for (auto &[array, pointer] : body.loads)
    w.line("tj_load(" + array + "[u], " + pointer + ");");
  w.close();
  w.close();
  w.line("#pragma unroll");
  w.open("for (int u = 0; u < kUnroll; ++u)");
  w.open("if (ok_[u])");
  w.line("[[maybe_unused]] const Index row = rows_[u], col = cols_[u];");
  w.raw(compute);
  w.close();
  w.close();
}

/// The transposed write of each tile. A thread takes 8 rows x 4 columns:
/// eight 4-byte shared reads, byte permutes into four 8-byte columns, four
/// 8-byte stores; the row groups run down a warp, so that each column's
/// bytes of the tile leave as whole sectors. (One byte read per element cost
/// the dGELU + cast + transpose kernel 5% on an H200.)
void writeTransposedStores(CudaWriter &w,
                           llvm::ArrayRef<PointwiseBody::Transposed> tiles,
                           Indexing indexing) {
  if (tiles.empty())
    return;
  w.line("__syncthreads();");
  w.open("for (int task = threadIdx.x; task < kTileRows / 8 * (kTileCols / "
         "4); task += blockDim.x)");
  w.line("const int r = task % (kTileRows / 8) * 8, c = task / (kTileRows / "
         "8) * 4;");
  if (!indexing.exact)
    w.open("if (col0 + c < kCols && row0 + r < kRows)");
  for (const auto &t : tiles) {
    w.line(formatv("tj_u32 {0}_lo[4], {0}_hi[4];", t.tile).str());
    w.line(formatv("tj_transpose_8x4({0}_lo, {0}_hi, &{0}[r][c], kTileCols + "
                   "4);",
                   t.tile)
               .str());
    w.line("#pragma unroll");
    w.line(formatv("for (int j = 0; j < 4; ++j) *reinterpret_cast<tj_vec<"
                   "tj_u32, 2> *>({0} + (col0 + c + j{1}) * kRows + row0 + r) "
                   "= tj_vec<tj_u32, 2>{{{{{2}_lo[j], {2}_hi[j]}};",
                   t.output, t.offset, t.tile)
               .str());
  }
  if (!indexing.exact)
    w.close();
  w.close();
  w.line("__syncthreads();");
}

/// Bias gradients: the block's rows meet in shared memory; with several
/// row splits (blockIdx.y), the splits' partial sums meet in scratch and the
/// strip's last block adds them in order.
void writeColumnSums(CudaWriter &w, const PointwiseBody &body, int64_t splits) {
  int64_t sums = body.columnSums.size();
  for (auto [index, s] : llvm::enumerate(body.columnSums)) {
    w.line("__shared__ float " + s.acc + "_rows[kRowsPerPass][kTileCols + 1];");
    w.line("#pragma unroll");
    w.line("for (int i = 0; i < kVec; ++i) " + s.acc +
           "_rows[threadIdx.x / kThreadsX][threadIdx.x % kThreadsX * kVec + i] "
           "= " +
           s.acc + "[i];");
    w.line("__syncthreads();");
    w.open("if (threadIdx.x < kTileCols && col0 + threadIdx.x < kCols)");
    w.line("float sum = 0.f;");
    w.line("for (int r = 0; r < kRowsPerPass; ++r) sum += " + s.acc +
           "_rows[r][threadIdx.x];");
    if (splits > 1)
      w.line(formatv("tj_scratch[(blockIdx.y * {0} + {1}) * kCols + col0 + "
                     "threadIdx.x] = sum;",
                     sums, index)
                 .str());
    else
      w.line(s.output + "[col0 + threadIdx.x" + s.offset + "] = tj_convert<" +
             s.type + ">::from(sum);");
    w.close();
  }
  if (splits <= 1 || body.columnSums.empty())
    return;
  writeLastBlockOfStrip(
      w, formatv("reinterpret_cast<unsigned *>(tj_scratch + {0} * kCols)",
                 splits * sums)
             .str());
  w.line("const volatile float *partials = tj_scratch;");
  w.open("if (threadIdx.x < kTileCols && col0 + threadIdx.x < kCols)");
  for (auto [index, s] : llvm::enumerate(body.columnSums)) {
    w.line("float " + s.acc + "_sum = 0.f;");
    w.line(formatv("for (unsigned s = 0; s < gridDim.y; ++s) {0}_sum += "
                   "partials[(s * {1} + {2}) * kCols + col0 + threadIdx.x];",
                   s.acc, sums, index)
               .str());
    w.line(s.output + "[col0 + threadIdx.x" + s.offset + "] = tj_convert<" +
           s.type + ">::from(" + s.acc + "_sum);");
  }
  w.close();
}

void writeAmaxes(CudaWriter &w, const PointwiseBody &body) {
  for (auto &[acc, output] : body.amaxes) {
    w.line("// One atomic per block: the block's max, by warp shuffles.");
    w.line("const float " + acc + "_block = tj_block_max(" + acc + ");");
    w.line("if (threadIdx.x == 0) tj_atomic_amax(" + output + ", " + acc +
           "_block);");
  }
}

/// The constants every pointwise kernel starts with: its vector and unroll,
/// the iteration space, and for tiled kernels the tile's shape.
void writeConstants(CudaWriter &w, int64_t vec, int64_t unroll, int64_t rows,
                    int64_t width, bool tiled, Indexing indexing) {
  w.line(formatv("using Index = {0};", indexing.type()).str());
  w.line(
      formatv("constexpr int kVec = {0}, kUnroll = {1};", vec, unroll).str());
  w.line(formatv("[[maybe_unused]] constexpr Index kRows = {0}, kCols = {1};",
                 rows, width)
             .str());
  if (tiled)
    w.line(formatv("constexpr int kThreadsX = {0}, kRowsPerPass = {1}, "
                   "kTileRows = {2}, kTileCols = {3};",
                   kThreadsX, kRowsPerPass, kTileRows, kThreadsX * vec)
               .str());
}

void writeTileDecl(CudaWriter &w, llvm::StringRef tile) {
  w.line("__shared__ __align__(16) tj_u8 " + tile.str() +
         "[kTileRows][kTileCols + 4];  // +4 bytes a row: no bank conflicts");
}

/// Opens the loop over the row tiles of a block's column strip and computes
/// each vector's indices; the caller closes it.
void openTileLoop(CudaWriter &w, Indexing indexing) {
  w.line("const Index col0 = static_cast<Index>(blockIdx.x) * kTileCols;");
  w.open("for (Index row0 = static_cast<Index>(blockIdx.y) * kTileRows; "
         "row0 < kRows; row0 += static_cast<Index>(gridDim.y) * kTileRows)");
  writeTiledIndices(w, indexing);
}

/// A transpose alone, of one-byte elements (an FP8 copy whose cast happened
/// elsewhere): bytes go from 16-byte loads straight into the shared tile,
/// with no conversion through float, which would make the kernel
/// compute-bound (two cvt per element each way).
EmittedKernel writeRawTranspose(KernelBuilder &builder, TransposeOp op,
                                int64_t rows, int64_t width,
                                Indexing indexing) {
  constexpr int64_t kVecBytes = 16;
  Value in = op.getInput();
  std::string type = elementTypeName(tensorType(in).getElementType());
  std::string input = builder.param(in).str();
  std::string out = builder.param(op.getOutput()).str();
  std::string tile = out + "_tile";
  int64_t tileCols = kThreadsX * kVecBytes;
  indexing.exact = rows % kTileRows == 0 && width % tileCols == 0;
  CudaWriter w;
  builder.writeSignature(w, kThreads);
  writeConstants(w, kVecBytes, kPasses, rows, width, /*tiled=*/true, indexing);
  writeTileDecl(w, tile);
  openTileLoop(w, indexing);
  // Loaded as words (as the tiled kernels pack theirs), not as a vector of
  // FP8 structs read back through a word pointer.
  w.line("tj_vec<tj_u32, kVec / 4> words_[kUnroll];");
  w.line("// Every load is issued before the first store to the tile.");
  w.line("#pragma unroll");
  w.line(formatv("for (int u = 0; u < kUnroll; ++u) if (ok_[u]) words_[u] = "
                 "*reinterpret_cast<const tj_vec<tj_u32, kVec / 4> *>({0} + "
                 "rows_[u] * kCols + cols_[u]);",
                 input)
             .str());
  w.line("#pragma unroll");
  w.open("for (int u = 0; u < kUnroll; ++u)");
  w.line("if (!ok_[u]) continue;");
  w.line("#pragma unroll");
  w.line("for (int word = 0; word < kVec / 4; ++word) "
         "*reinterpret_cast<tj_u32 *>(&" +
         tile +
         "[rows_[u] - row0][cols_[u] - col0 + 4 * word]) = words_[u].v[word];");
  w.close();
  writeTransposedStores(w, {PointwiseBody::Transposed{tile, out, "", type}},
                        indexing);
  w.close();
  return builder.finish(w,
                        {(width + tileCols - 1) / tileCols,
                         (rows + kTileRows - 1) / kTileRows, 1},
                        {kThreads, 1, 1});
}

} // namespace

llvm::Error tejit::codegen::emitPointwise(KernelBuilder &builder,
                                          std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  int64_t rows, minBytes, maxBytes;
  int64_t width = iterationWidth(group, rows, minBytes, maxBytes);
  if (width == INT64_MAX)
    return noEmitter(group.op, "no matrix operand");
  bool tiled = llvm::any_of(group.ops, [](Operation *op) {
    return isa<TransposeOp, BiasGradOp>(op);
  });
  bool transposes = llvm::any_of(
      group.ops, [](Operation *op) { return isa<TransposeOp>(op); });
  bool reduces = llvm::any_of(
      group.ops, [](Operation *op) { return isa<BiasGradOp>(op); });
  int64_t vec = vectorWidth({width}, minBytes);
  // FP8-only copies (a transpose of a cast done elsewhere) move 16 elements
  // a vector: 16-byte accesses, like every other kernel's.
  if (maxBytes == 1 && width % 16 == 0)
    vec = 16;
  if (transposes && (vec % 4 != 0 || rows % 8 != 0))
    return noEmitter(group.op, "a transpose needs rows % 8 == 0 and a last "
                               "dim % 4 == 0");
  Indexing indexing;
  indexing.narrow = fitsNarrowIndex(group);
  if (group.ops.size() == 1 && maxBytes == 1 && width % 16 == 0)
    if (auto transpose = dyn_cast<TransposeOp>(group.ops.front());
        transpose && group.isOutput(transpose.getOutput()) &&
        tensorType(transpose.getInput()).getElementType() ==
            tensorType(transpose.getOutput()).getElementType()) {
      kernels.push_back(
          writeRawTranspose(builder, transpose, rows, width, indexing));
      return llvm::Error::success();
    }
  PointwiseBody body(builder, width);
  // The code of one vector sits in `for u`, `if (ok_[u])` (and the row-tile
  // loop when tiled); its loads and prologue are known once it is written.
  CudaWriter compute(tiled ? 4 : 3);
  if (llvm::Error error = body.writeVector(compute))
    return error;

  int64_t tileCols = kThreadsX * vec;
  // A bias gradient splits its rows over enough blocks to fill the GPU,
  // about four per SM of 132, its partial sums meeting in scratch. (The
  // 8192 x 16384 dGELU + bias gradient + cast + transpose on an H200, 128-row
  // tiles: 512 blocks 242 us, 1024 blocks 246 us, 256 blocks 326 us. The
  // 8192 x 12288 dQKV cast + bias gradient: 576 blocks 129 us, 384 blocks -
  // whole rounds of one block per SM - 143 us: warps per SM matter more
  // than an even last round.)
  constexpr int64_t kReduceTargetBlocks = 4 * 132;
  int64_t strips = (width + tileCols - 1) / tileCols, splits = 1;
  if (reduces) {
    splits = std::clamp<int64_t>((kReduceTargetBlocks + strips / 2) / strips, 1,
                                 (rows + kTileRows - 1) / kTileRows);
    // Every split stores its partial sums before it takes a ticket, so
    // only the strips' arrival counters, after the sums, start from zero.
    int64_t sumBytes = splits * int64_t(body.columnSums.size()) * width * 4;
    if (splits > 1)
      builder.requestScratch(sumBytes + strips * 4, sumBytes, strips * 4);
  }
  if (tiled)
    indexing.exact = rows % kTileRows == 0 && width % tileCols == 0;
  else
    indexing.exact = rows * width / vec % (kThreads * kUnroll) == 0;
  CudaWriter w;
  builder.writeSignature(w, kThreads);
  writeConstants(w, vec, tiled ? kPasses : kUnroll, rows, width, tiled,
                 indexing);
  for (const std::string &line : body.prologue)
    w.line(line);
  for (auto &[acc, output] : body.amaxes)
    w.line("float " + acc + " = 0.f;");
  for (const auto &s : body.columnSums)
    w.line("float " + s.acc + "[kVec] = {};");
  for (const auto &t : body.transposes)
    writeTileDecl(w, t.tile);
  if (tiled) {
    openTileLoop(w, indexing);
  } else {
    writeFlatIndices(w, indexing);
  }
  writeLoadsThenCompute(w, body, compute.str());
  if (tiled) {
    writeTransposedStores(w, body.transposes, indexing);
    w.close();
  }
  writeAmaxes(w, body);
  writeColumnSums(w, body, splits);

  Dim3 grid, block{kThreads, 1, 1};
  if (tiled) {
    grid.x = strips;
    grid.y = reduces ? splits : (rows + kTileRows - 1) / kTileRows;
  } else {
    int64_t vectors = rows * width / vec;
    grid.x = (vectors + kThreads * kUnroll - 1) / (kThreads * kUnroll);
  }
  kernels.push_back(builder.finish(w, grid, block));
  return llvm::Error::success();
}
