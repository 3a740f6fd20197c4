//===- RotaryKernels.cpp - rotary position embeddings of q and k ----------===//
//
// te.rotary rotates channel pairs (x[i], x[i + r/2]) of every head by the
// angles of its position: out = x cos(f) + rotate_half(x) sin(f), with
// rotate_half(x) = cat(-x[r/2:r], x[:r/2]) over the table's width r;
// `inverse` negates sin. Interleaved (GPT-J's layout), the pairs are
// (x[2i], x[2i+1]) and a thread loads its pairs as one vector. Channels
// [r, d) (partial rotary) are copied through by the same block.
//
// One block per position s: the angles of a position are shared by all its
// batch x heads rows, so each thread owns one vector of kVec pairs, takes
// their sines and cosines once (sincosf) and reuses them for every row it
// walks. A thread reads x[i..] and x[i + d/2..] of a row together, so each
// element is loaded once and written once, as 16-byte vectors where d/2
// allows. x may be a strided view (q or k as columns of the QKV
// projection, AttentionViews.h): rows are then read at its token stride.
//
// The interpreter (compiler/interpreter/AttentionKernels.cpp) computes in
// float64; here angles, sines, cosines and products are float, so results
// differ from it by float rounding (before the final rounding to x's type).
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"

#include "dialects/AttentionViews.h"
#include "dialects/TEDialect.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace mlir;
using namespace mlir::te;
using namespace tejit::codegen;
using llvm::formatv;

namespace {

/// Rows (of batch x heads) each thread walks at least, to amortize its
/// sincosf over rows; rows loaded before any is computed.
constexpr int64_t kMinRowsPerThread = 4, kUnroll = 4, kMaxThreads = 256,
                  kWarpSize = 32;

/// The geometry of one te.rotary: x is [s, b, h, d] or [b, s, h, d]; the
/// first `rotated` channels of each head rotate.
struct RotaryShape {
  int64_t seq, batch, heads, dim, rotated;
  bool sbhd, interleaved;

  explicit RotaryShape(RotaryOp op) {
    ArrayRef<int64_t> shape = tensorType(op.getInput()).getShape();
    sbhd = op.getQkvFormat() == QkvFormat::sbhd;
    seq = shape[sbhd ? 0 : 1];
    batch = shape[sbhd ? 1 : 0];
    heads = shape[2];
    dim = shape[3];
    rotated = tensorType(op.getFreqs()).getShape()[3];
    interleaved = op.getInterleaved();
  }
};

/// The offset of row `r` (= b * heads + h) at position `s`, in elements;
/// `strided`: tokens kTokenStride elements apart (a view), else packed.
std::string rowOffset(const RotaryShape &shape, bool strided = false) {
  if (strided)
    return shape.sbhd ? "(s * kBatch + r / kHeads) * kTokenStride + "
                        "r % kHeads * kDim"
                      : "(r / kHeads * kSeq + s) * kTokenStride + "
                        "r % kHeads * kDim";
  if (shape.sbhd) // [s, b, h, d]: the rows of one position are contiguous.
    return "(s * kRows + r) * kDim";
  return "((r / kHeads * kSeq + s) * kHeads + r % kHeads) * kDim";
}

/// Interleaved pairs: loads the 2 x kVec elements at `pointer` and splits
/// them into the pairs' lower (`lo`) and upper (`hi`) elements.
void loadPairs(CudaWriter &w, StringRef pointer, StringRef lo, StringRef hi) {
  w.open("");
  w.line("float pairs[2 * kVec];");
  w.line("tj_load(pairs, " + pointer + ");");
  w.line("#pragma unroll");
  w.line(("for (int i = 0; i < kVec; ++i) " + lo + "[i] = pairs[2 * i], " + hi +
          "[i] = pairs[2 * i + 1];")
             .str());
  w.close();
}

/// Sines and cosines of the thread's 2 x kVec angles. TE lays freqs out as
/// its first half repeated (interleaved: each angle twice in a row), so the
/// upper angle usually equals the lower one and reuses its sincosf (a
/// branch every thread takes alike).
void writeAngles(CudaWriter &w, StringRef freqs, bool interleaved) {
  w.line("float f_lo[kVec], f_hi[kVec], sin_lo[kVec], cos_lo[kVec], "
         "sin_hi[kVec], cos_hi[kVec];");
  if (interleaved) {
    loadPairs(w, (freqs + " + s * kRot + 2 * col").str(), "f_lo", "f_hi");
  } else {
    w.line("tj_load(f_lo, " + freqs + " + s * kRot + col);");
    w.line("tj_load(f_hi, " + freqs + " + s * kRot + kHalf + col);");
  }
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kVec; ++i)");
  w.line("sincosf(f_lo[i], &sin_lo[i], &cos_lo[i]);");
  w.line("if (f_hi[i] == f_lo[i]) sin_hi[i] = sin_lo[i], cos_hi[i] = "
         "cos_lo[i];");
  w.line("else sincosf(f_hi[i], &sin_hi[i], &cos_hi[i]);");
  w.close();
}

/// Loads kUnroll rows of pairs, then rotates and stores each. A pair's
/// lower element is at `col` and its upper one kHalf further, or, when
/// interleaved, the thread's pairs are the 2 x kVec elements at 2 * col.
void writeRows(CudaWriter &w, const RotaryShape &shape, StringRef in,
               StringRef out, bool inverse, bool stridedIn) {
  std::string first = shape.interleaved ? " + 2 * col" : " + col";
  w.open("for (tj_i64 r0 = threadIdx.x / kPairVecs; r0 < kRows; r0 += "
         "kUnroll * kRowsPerPass)");
  w.line("float lo[kUnroll][kVec], hi[kUnroll][kVec];");
  w.line("#pragma unroll");
  w.open("for (int u = 0; u < kUnroll; ++u)");
  w.line("const tj_i64 r = r0 + u * kRowsPerPass;");
  w.open("if (r < kRows)");
  w.line("const tj_i64 base = " + rowOffset(shape, stridedIn) + first + ";");
  if (shape.interleaved) {
    loadPairs(w, (in + " + base").str(), "lo[u]", "hi[u]");
  } else {
    w.line("tj_load(lo[u], " + in + " + base);");
    w.line("tj_load(hi[u], " + in + " + base + kHalf);");
  }
  w.close();
  w.close();
  w.line("#pragma unroll");
  w.open("for (int u = 0; u < kUnroll; ++u)");
  w.line("const tj_i64 r = r0 + u * kRowsPerPass;");
  w.open("if (r < kRows)");
  w.line("float lo_out[kVec], hi_out[kVec];");
  // rotate_half(x)[i] = -x[i + d/2] and rotate_half(x)[i + d/2] = x[i];
  // the inverse rotation negates sin, swapping the signs.
  const char *loSign = inverse ? "+" : "-", *hiSign = inverse ? "-" : "+";
  w.line("#pragma unroll");
  w.open("for (int i = 0; i < kVec; ++i)");
  w.line(formatv("lo_out[i] = lo[u][i] * cos_lo[i] {0} hi[u][i] * sin_lo[i];",
                 loSign)
             .str());
  w.line(formatv("hi_out[i] = hi[u][i] * cos_hi[i] {0} lo[u][i] * sin_hi[i];",
                 hiSign)
             .str());
  w.close();
  w.line("const tj_i64 base = " + rowOffset(shape) + first + ";");
  if (shape.interleaved) {
    w.line("float pairs[2 * kVec];");
    w.line("#pragma unroll");
    w.line("for (int i = 0; i < kVec; ++i) pairs[2 * i] = lo_out[i], "
           "pairs[2 * i + 1] = hi_out[i];");
    w.line("tj_store(" + out + " + base, pairs);");
  } else {
    w.line("tj_store(" + out + " + base, lo_out);");
    w.line("tj_store(" + out + " + base + kHalf, hi_out);");
  }
  w.close();
  w.close();
  w.close();
}

/// Partial rotary: copies channels [kRot, kDim) of the position's rows,
/// kPassVec elements per thread at a time.
void writePassThrough(CudaWriter &w, const RotaryShape &shape, StringRef in,
                      StringRef out, bool stridedIn) {
  w.open("for (tj_i64 i = threadIdx.x; i < kRows * kPassVecs; i += "
         "blockDim.x)");
  w.line("const tj_i64 r = i / kPassVecs;");
  w.line("const tj_i64 c = kRot + i % kPassVecs * kPassVec;");
  w.line("float v[kPassVec];");
  w.line("tj_load(v, " + in + " + " + rowOffset(shape, stridedIn) + " + c);");
  w.line("tj_store(" + out + " + " + rowOffset(shape) + " + c, v);");
  w.close();
}

} // namespace

llvm::Error tejit::codegen::emitRotary(KernelBuilder &builder,
                                       std::vector<EmittedKernel> &kernels) {
  auto rotary = cast<RotaryOp>(builder.group.ops.front());
  RotaryShape shape(rotary);
  Type element = tensorType(rotary.getInput()).getElementType();
  if (elementTypeName(element).empty())
    return noEmitter(rotary, "an input of an unsupported element type");
  int64_t half = shape.rotated / 2;
  int64_t tokenStride = attentionTokenStride(rotary.getInput());
  // Pairs per thread: a vector of lower (and of upper) elements, or,
  // interleaved, half a vector of whole pairs; rows start at multiples of
  // the head dim (and of the token stride of a view).
  SmallVector<int64_t, 3> extents = {shape.interleaved ? shape.rotated : half,
                                     shape.dim};
  if (tokenStride)
    extents.push_back(tokenStride);
  int64_t vecElements = vectorWidth(extents, elementBytes(element));
  int64_t vec = shape.interleaved ? vecElements / 2 : vecElements;
  if (vec < 1)
    return noEmitter(rotary, "an odd vector of interleaved pairs");
  int64_t pairVecs = half / vec, rows = shape.batch * shape.heads;
  if (pairVecs > 1024)
    return noEmitter(rotary, "a head dim wider than a block");
  // A whole number of rows per pass, so a thread's column never changes;
  // few enough rows per pass that each thread walks several, but a warp at
  // least (narrow heads would otherwise make blocks of a few threads).
  int64_t minRows = (kWarpSize + pairVecs - 1) / pairVecs;
  int64_t maxRows = std::max<int64_t>(minRows, kMaxThreads / pairVecs);
  int64_t rowsPerPass = std::clamp<int64_t>(
      (rows + kMinRowsPerThread - 1) / kMinRowsPerThread, minRows, maxRows);
  int64_t threads = pairVecs * rowsPerPass;

  CudaWriter w;
  builder.writeSignature(w, threads);
  w.line(
      formatv("constexpr int kVec = {0}, kUnroll = {1};", vec, kUnroll).str());
  // Interleaved pairs are adjacent: no half-width offset.
  w.line(formatv("constexpr tj_i64 kRows = {0}, kDim = {1}, kRot = {2}{3};",
                 rows, shape.dim, shape.rotated,
                 shape.interleaved ? "" : ", kHalf = " + std::to_string(half))
             .str());
  int64_t passed = shape.dim - shape.rotated;
  if (passed) {
    SmallVector<int64_t, 4> passExtents = {passed, shape.rotated, shape.dim};
    if (tokenStride)
      passExtents.push_back(tokenStride);
    int64_t passVec = vectorWidth(passExtents, elementBytes(element));
    w.line(formatv("constexpr tj_i64 kPassVec = {0}, kPassVecs = {1};", passVec,
                   passed / passVec)
               .str());
  }
  // The row offsets' constants (rowOffset): bshd rows need the sequence
  // length, strided sbhd rows the batch, and both the heads.
  if (!shape.sbhd)
    w.line(formatv("constexpr tj_i64 kSeq = {0}, kHeads = {1};", shape.seq,
                   shape.heads)
               .str());
  else if (tokenStride)
    w.line(formatv("constexpr tj_i64 kBatch = {0}, kHeads = {1};", shape.batch,
                   shape.heads)
               .str());
  if (tokenStride)
    w.line(formatv("constexpr tj_i64 kTokenStride = {0};", tokenStride).str());
  w.line(formatv("constexpr tj_i64 kPairVecs = {0}, kRowsPerPass = {1};",
                 pairVecs, rowsPerPass)
             .str());
  w.line("const tj_i64 s = blockIdx.x;");
  w.line("const tj_i64 col = threadIdx.x % kPairVecs * kVec;");
  writeAngles(w, builder.param(rotary.getFreqs()), shape.interleaved);
  writeRows(w, shape, builder.param(rotary.getInput()),
            builder.param(rotary.getOutput()), rotary.getInverse(),
            tokenStride != 0);
  if (passed)
    writePassThrough(w, shape, builder.param(rotary.getInput()),
                     builder.param(rotary.getOutput()), tokenStride != 0);
  kernels.push_back(
      builder.finish(w, Dim3{shape.seq, 1, 1}, Dim3{threads, 1, 1}));
  return llvm::Error::success();
}
