//===- Kernels.h - the interpreter's math on tensors ------------*- C++ -*-===//
//
// The computations behind te ops, on Tensors, shared by the primitive and the
// layer ops. Callers check shapes first (the op verifiers and the
// interpreter's own checks); kernels only assert them.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_COMPILER_INTERPRETER_KERNELS_H
#define TEJIT_COMPILER_INTERPRETER_KERNELS_H

#include "compiler/interpreter/Fp8.h"
#include "compiler/interpreter/Interpreter.h"
#include "dialects/TEDialect.h"

namespace tejit::interp {

//===----------------------------------------------------------------------===//
// Shapes and GEMMs (TensorKernels.cpp)
//===----------------------------------------------------------------------===//

/// `x` with `shape` (same element count), read row-major.
Tensor reshape(Tensor x, llvm::ArrayRef<int64_t> shape);
/// The transpose of a matrix.
Tensor transpose(const Tensor &x);
/// Elements [offset, offset + size) of the last dim.
Tensor slice(const Tensor &x, int64_t offset, int64_t size);
/// Concatenation along the last dim.
Tensor concat(llvm::ArrayRef<const Tensor *> inputs);
/// Elementwise sum of two tensors of one shape.
Tensor add(const Tensor &lhs, const Tensor &rhs);
/// `x + bias`, `bias` a vector along the last dim.
Tensor biasAdd(const Tensor &x, const Tensor &bias);
/// Sum over all dims but the last.
Tensor biasGrad(const Tensor &grad);
/// `op(a) * op(b)` on matrices, `op` transposing when its flag is set.
Tensor matmul(const Tensor &a, const Tensor &b, bool transposeA,
              bool transposeB);
/// `x W^T (+ bias)` with `W` [out, in]; the leading dims of `x` are kept.
Tensor linear(const Tensor &x, const Tensor &weight, const Tensor *bias);

//===----------------------------------------------------------------------===//
// Dropout (TensorKernels.cpp)
//===----------------------------------------------------------------------===//

/// The key of one dropout site (see DropoutRng.h).
struct DropoutKey {
  uint64_t seed = 0, offset = 0, stream = 0;
};

/// The keep mask (1 = kept) of a dropout of `rate` over `shape`; runs of
/// `group` consecutive elements share a draw (drop path).
Tensor dropoutKeep(llvm::ArrayRef<int64_t> shape, double rate,
                   const DropoutKey &key, int64_t group = 1);
/// `x * keep / (1 - rate)`.
Tensor maskScale(const Tensor &x, const Tensor &keep, double rate);
/// Dropout of `rate` applied to `x`: maskScale(x, dropoutKeep(...), rate).
Tensor applyDropout(const Tensor &x, double rate, const DropoutKey &key,
                    int64_t group = 1);

//===----------------------------------------------------------------------===//
// Normalization (NormKernels.cpp)
//===----------------------------------------------------------------------===//

/// A normalization's output and per-row statistics (shaped as the leading
/// dims of the input); `mean` is empty for RMSNorm.
struct NormOutputs {
  Tensor output, mean, rsigma;
};

/// LayerNorm over the last dim (biased variance).
NormOutputs layerNorm(const Tensor &x, const Tensor &gamma, const Tensor &beta,
                      double eps, bool zeroCenteredGamma);
/// RMSNorm over the last dim.
NormOutputs rmsNorm(const Tensor &x, const Tensor &gamma, double eps,
                    bool zeroCenteredGamma);
/// LayerNorm (with `beta`) or RMSNorm (`beta` unused): the output only.
Tensor normalize(mlir::te::Normalization kind, const Tensor &x,
                 const Tensor &gamma, const Tensor *beta, double eps,
                 bool zeroCenteredGamma);

/// Gradients of a normalization; `beta` is empty for RMSNorm.
struct NormGrads {
  Tensor input, gamma, beta;
};

/// Gradients of layerNorm given the output gradient and its statistics.
NormGrads layerNormBwd(const Tensor &grad, const Tensor &x, const Tensor &mean,
                       const Tensor &rsigma, const Tensor &gamma,
                       bool zeroCenteredGamma);
/// Gradients of rmsNorm given the output gradient and its statistics.
NormGrads rmsNormBwd(const Tensor &grad, const Tensor &x, const Tensor &rsigma,
                     const Tensor &gamma, bool zeroCenteredGamma);

//===----------------------------------------------------------------------===//
// Activations (ActivationKernels.cpp)
//===----------------------------------------------------------------------===//

/// An MLP activation along the last dim; gated ones halve it. `params`
/// are clamped_swiglu's (the other activations ignore them).
Tensor activation(const Tensor &x, mlir::te::Activation kind,
                  const mlir::te::ActivationParams &params = {});
/// The gradient of activation() with respect to `x`, given the output's.
Tensor activationGrad(const Tensor &grad, const Tensor &x,
                      mlir::te::Activation kind,
                      const mlir::te::ActivationParams &params = {});

//===----------------------------------------------------------------------===//
// Attention (AttentionKernels.cpp)
//===----------------------------------------------------------------------===//

/// What the attention core needs besides q, k and v.
struct AttentionParams {
  mlir::te::QkvFormat format = mlir::te::QkvFormat::sbhd;
  mlir::te::AttnMaskType maskType = mlir::te::AttnMaskType::no_mask;
  /// [b, 1, 1, s_kv] for padding masks, [b or 1, h or 1, s_q, s_kv] for
  /// arbitrary ones; null for the others. Nonzero = masked out.
  const Tensor *mask = nullptr;
  /// [b, 1, 1, s_q], nonzero = padded query (cross-attention): its output
  /// row is 0, its log-sum-exp -inf, and it has no gradient; or null.
  const Tensor *queryMask = nullptr;
  double softmaxScale = 1.0;
  double dropout = 0.0;
  DropoutKey dropoutKey;
  /// Sliding window (Transformer Engine's window_size): key j is visible
  /// to query i only if i + shift - left <= j <= i + shift + right, where
  /// shift = s_kv - s_q except for the causal and padding_causal types
  /// (top-left aligned); -1 leaves a side unbounded.
  int64_t windowLeft = -1, windowRight = -1;
  /// Packed sequences (format thd): cu_seqlens of the queries and of the
  /// keys ([b + 1], already checked), and the longest lengths (the
  /// statistics' padded s_q, and s_kv).
  const Tensor *cuSeqlensQ = nullptr, *cuSeqlensKv = nullptr;
  int64_t maxSeqlenQ = 0, maxSeqlenKv = 0;
  /// What is added to the scaled scores before the masks
  /// (docs/attention-bias.md): `bias` [1 or b, 1 or h, s_q, s_kv] for
  /// post_scale_bias; for alibi -slope * |i - j + off| with the slopes of
  /// `alibiSlopes` ([h] or [b, h]), or vanillaAlibiSlope's when it is null.
  mlir::te::AttnBiasType biasType = mlir::te::AttnBiasType::no_bias;
  const Tensor *bias = nullptr, *alibiSlopes = nullptr;
  /// Whether attentionBwd returns the bias's gradient [1, h, s_q, s_kv].
  bool biasGrad = false;
  /// Context parallelism (docs/context-parallel.md): with cpRanks N > 1 the
  /// queries are rank cpRank's 2c tokens, local row i at global position
  /// cpRank c + i for i < c and (2N - 1 - cpRank) c + i - c otherwise; the
  /// keys are the whole sequence. Causal: key j is visible iff j <= that
  /// position (no_mask: every key).
  int64_t cpRanks = 1, cpRank = 0;

  /// The global position of local query `i` of `localSeq` under context
  /// parallelism (`i` itself without it).
  int64_t queryPosition(int64_t i, int64_t localSeq) const {
    if (cpRanks == 1)
      return i;
    int64_t chunk = localSeq / 2;
    return i < chunk ? cpRank * chunk + i
                     : (2 * cpRanks - 1 - cpRank) * chunk + (i - chunk);
  }

  /// Takes an optional window_size attribute's [left, right].
  void setWindow(std::optional<llvm::ArrayRef<int64_t>> window) {
    if (window) {
      windowLeft = (*window)[0];
      windowRight = (*window)[1];
    }
  }
};

/// The attention output (q's layout) and the softmax log-sum-exp per row
/// ([b, heads, s_q]; -inf for a fully masked row, whose output is 0).
/// `maxProbability` is the largest (normalized) softmax probability, before
/// any dropout (FP8 attention's amax_s, which takes no dropout; 0 when every
/// row is masked, NaN when one is NaN).
struct AttentionOutputs {
  Tensor output, softmaxLse;
  double maxProbability = 0.0;
};

AttentionOutputs attention(const Tensor &query, const Tensor &key,
                           const Tensor &value, const AttentionParams &params);

/// te.kv_cache_attention (docs/kv-cache-plan.md): the caches with the new
/// tokens stored, and the new queries' attention over them ([t, h, d]).
struct KvCacheOutputs {
  Tensor output, keyCache, valueCache;
};

/// `params` gives the mask type (padding or padding_causal_bottom_right)
/// and the softmax scale; the sequences must pass kvCacheSequencesError.
KvCacheOutputs kvCacheAttention(const Tensor &query, const Tensor &key,
                                const Tensor &value, const Tensor &keyCache,
                                const Tensor &valueCache,
                                const Tensor &cuSeqlensQ,
                                const Tensor &cuSeqlensKv, int64_t maxSeqlenQ,
                                AttentionParams params);

/// te.kv_cache_attention over paged caches (docs/paged-kv-cache.md):
/// `keyCache` / `valueCache` are [pages, page_size, g, d] and row r of
/// sequence i lives in page `pageTable[i, r / page_size]`, row `r %
/// page_size`. The result is kvCacheAttention's over the rows so mapped;
/// the entries the step touches must pass pageTableError.
KvCacheOutputs
pagedKvCacheAttention(const Tensor &query, const Tensor &key,
                      const Tensor &value, const Tensor &keyCache,
                      const Tensor &valueCache, const Tensor &pageTable,
                      const Tensor &cuSeqlensQ, const Tensor &cuSeqlensKv,
                      int64_t maxSeqlenQ, const AttentionParams &params);

/// Why `pageTable` ([b, max_pages]) does not map the rows [0, L_i) of every
/// sequence (L_i from `cuSeqlensKv`) into pages [0, `pages`) of `pageSize`
/// rows, or an empty string when it does. Entries past a sequence's rows
/// are never read, so they may hold anything.
std::string pageTableError(const Tensor &pageTable, const Tensor &cuSeqlensKv,
                           int64_t pageSize, int64_t pages);

/// Why the new tokens (`cuSeqlensQ`, at most `maxSeqlenQ` a sequence within
/// `tokens`) and the lengths after the step (`cuSeqlensKv`, at most
/// `cacheRows`, never fewer than the new tokens) do not describe a KV-cache
/// step, or an empty string when they do.
std::string kvCacheSequencesError(const Tensor &cuSeqlensQ,
                                  const Tensor &cuSeqlensKv, int64_t maxSeqlenQ,
                                  int64_t tokens, int64_t cacheRows);

/// Why `cuSeqlens` does not describe packed sequences of at most
/// `maxSeqlen` tokens within `tokens` (from 0, never decreasing, ending at
/// most at `tokens`), or an empty string when it does.
std::string packedSequencesError(const Tensor &cuSeqlens, int64_t maxSeqlen,
                                 int64_t tokens);

/// Transformer Engine's ALiBi slope of head `head` of `heads` when the
/// caller gives none (dialects/AlibiSlopes.h: the f32 value the runtime
/// uploads).
double vanillaAlibiSlope(int64_t head, int64_t heads);

/// Gradients of attention with respect to q, k and v, and with
/// AttentionParams::biasGrad the bias's ([1, h, s_q, s_kv]; else empty).
/// `maxScoreGrad` is max |dS| over the gradient of the post-scale scores
/// (what the bias's sums; FP8 attention's amax_dp is it times the softmax
/// scale).
struct AttentionGrads {
  Tensor query, key, value, bias;
  double maxScoreGrad = 0.0;
};

/// The attention backward as fused kernels compute it: probabilities from
/// `softmaxLse`, the softmax correction from rowsum(grad * output). This is
/// the exact gradient when `output` and `softmaxLse` are attention()'s.
AttentionGrads attentionBwd(const Tensor &grad, const Tensor &query,
                            const Tensor &key, const Tensor &value,
                            const Tensor &output, const Tensor &softmaxLse,
                            const AttentionParams &params);

/// Rotary embedding: `x cos(f) + rotate_half(x) sin(f)` per head over the
/// first r = freqs' width channels (the rest pass through), `f` the angles
/// at the element's sequence position; `inverse` negates the sine;
/// `interleaved` pairs adjacent channels instead of halves.
Tensor rotary(const Tensor &x, const Tensor &freqs, mlir::te::QkvFormat format,
              bool inverse, bool interleaved = false);

//===----------------------------------------------------------------------===//
// FP8 quantization and scaling (ScalingKernels.cpp)
//===----------------------------------------------------------------------===//

/// One element cast to FP8 as Transformer Engine's kernels cast it:
/// `roundToFp8(float(float(x) * float(scale)), kind)`, the product rounded to
/// float32 first.
double castToFp8(double x, double scale, Fp8Kind kind);
/// castToFp8(x, scale, kind) per element.
Tensor quantize(const Tensor &x, double scale, Fp8Kind kind);
/// max |x| over all elements: NaN when one is NaN, 0 for an empty tensor.
double absMax(const Tensor &x);
/// `x * scaleInv` per element, in double: an FP8 tensor (any shape) with one
/// scale inverse back to the values it stands for. Exact, as an FP8
/// significand times a float32 one fits in a double.
Tensor dequantize(const Tensor &x, double scaleInv);

/// A scale and its inverse, both float32 values.
struct Fp8Scale {
  float scale, scaleInv;
};

/// Current scaling's scale for `amax` (read as a float32): fp8_max / amax in
/// float32; 1 for amax 0, inf or NaN; FLT_MAX when the quotient overflows;
/// with `power2`, the mantissa masked off. scaleInv = 1 / scale in float32.
Fp8Scale currentScale(double amax, Fp8Kind kind, bool power2);

/// The FP8 GEMM `(a * aScaleInv) (b * bScaleInv)^T`, a [M, K] and b [N, K]:
/// the float64 matmul of the dequantized operands.
Tensor scaledMatmul(const Tensor &a, const Tensor &b, double aScaleInv,
                    double bScaleInv);

/// What a DelayedScaling update needs from its recipe and FP8 type.
struct DelayedScalingParams {
  Fp8Kind kind = Fp8Kind::E4M3;
  int64_t margin = 0;
  /// amax_compute_algo: `most_recent` (true) or `max` (false).
  bool mostRecent = false;
};

/// The meta state after a DelayedScaling update: history [len, slots], scale
/// and scale_inv [slots], all float32 values.
struct DelayedScalingState {
  Tensor amaxHistory, scale, scaleInv;
};

/// One step of DelayedScaling for every slot, given this step's `amaxes`
/// (see te.delayed_scaling_update and ScalingKernels.cpp for the details).
DelayedScalingState delayedScalingUpdate(const Tensor &amaxHistory,
                                         const Tensor &scale,
                                         const Tensor &amaxes,
                                         const DelayedScalingParams &params);

//===----------------------------------------------------------------------===//
// Float8BlockScaling (BlockScalingKernels.cpp, docs/block-scaling.md)
//===----------------------------------------------------------------------===//

/// A matrix cast to FP8 in blocks and its scale inverses, laid out as
/// dialects/BlockScaleLayout.h says (padding 0).
struct BlockQuantized {
  Tensor output, scaleInv;
};

/// te.block_quantize: the matrix `x` (or its transpose, with `transpose`)
/// cut into blocks of 128 elements of a row (`blockDim` 1) or 128 x 128
/// tiles (2); each block cast with currentScale() of its own amax.
BlockQuantized blockQuantize(const Tensor &x, int64_t blockDim, bool transpose,
                             bool power2, Fp8Kind kind);

/// The matrix `x` with each element times its scale inverse: `scaling` 0
/// reads the one scale of `scaleInv` ([1]), 1 and 2 the scale of the
/// element's block (BlockScaleLayout.h).
Tensor dequantize(const Tensor &x, const Tensor &scaleInv, int64_t scaling);

/// te.scaled_matmul with per-operand scalings (ScaledMatmulOp::getAScaling):
/// the float64 matmul `dequantize(a) dequantize(b)^T`.
Tensor blockScaledMatmul(const Tensor &a, const Tensor &b,
                         const Tensor &aScaleInv, int64_t aScaling,
                         const Tensor &bScaleInv, int64_t bScaling);

//===----------------------------------------------------------------------===//
// GroupedLinear (GroupedKernels.cpp, docs/grouped-linear.md)
//
// Groups are the row segments [offsets[g], offsets[g + 1]) of a matrix
// [T, .] (offsets o_0 = 0 .. o_G from segmentOffsets()), rows past o_G being
// padding (0 in outputs, in no sum); the casts and amaxes take empty
// `offsets` for a stacked tensor [G, R, C] instead, whose groups are its
// slices.
//===----------------------------------------------------------------------===//

/// Why `mSplits` (G row counts) cannot cut `tokens` rows into consecutive
/// segments: a value that is not an i32 integer, a negative one, a sum over
/// `tokens`, or with `fp8` a value that is not a multiple of 16; an empty
/// string when they can. The text names `m_splits`.
std::string mSplitsError(const Tensor &mSplits, int64_t tokens, bool fp8);

/// The offsets o_0 = 0, o_1, ..., o_G of the segments of `mSplits` (which
/// passed mSplitsError).
llvm::SmallVector<int64_t> segmentOffsets(const Tensor &mSplits);

/// Rows [begin, end) of a matrix.
Tensor rowRange(const Tensor &x, int64_t begin, int64_t end);
/// Copies the matrix `rows` into `out` from row `begin` on.
void writeRows(Tensor &out, int64_t begin, const Tensor &rows);
/// Slice g of a stacked tensor [G, ...]: a tensor of the trailing dims.
Tensor groupOf(const Tensor &stack, int64_t g);
/// Copies `slice` into slice g of the stacked tensor `out`.
void writeGroup(Tensor &out, int64_t g, const Tensor &slice);

/// te.grouped_matmul, rows form: `a[seg g] op(b[g]) (+ bias[g])` with a
/// [T, K], b [G, K, N] ([G, N, K] with `transposeB`), bias [G, N] or null;
/// the output [T, N].
Tensor groupedMatmulRows(const Tensor &a, const Tensor &b,
                         llvm::ArrayRef<int64_t> offsets, bool transposeB,
                         const Tensor *bias);
/// te.grouped_matmul, contraction form: `a[seg g]^T b[seg g]` with a [T, M],
/// b [T, N]; the output [G, M, N].
Tensor groupedMatmulContraction(const Tensor &a, const Tensor &b,
                                llvm::ArrayRef<int64_t> offsets);
/// te.grouped_linear: `x[seg g] weight[g]^T + bias[g]` over the rows of `x`
/// [..., K] (its leading dims flattened); weight [G, N, K], bias [G, N] or
/// null. The output is [..., N].
Tensor groupedLinear(const Tensor &x, const Tensor &weight, const Tensor *bias,
                     llvm::ArrayRef<int64_t> offsets);
/// te.grouped_bias_grad: the column sums of each segment of `grad` [T, N],
/// as [G, N].
Tensor groupedBiasGrad(const Tensor &grad, llvm::ArrayRef<int64_t> offsets);

/// te.grouped_amax: absMax() of each group of `x`, as [G].
Tensor groupedAmax(const Tensor &x, llvm::ArrayRef<int64_t> offsets);

/// A grouped FP8 cast and its per-group amaxes [G].
struct GroupedQuantized {
  Tensor output, amax;
};

/// te.grouped_quantize: each group of `x` cast with quantize() and its
/// scale `scale[g]` ([G]); with `transpose`, the output is [K, T] (segment
/// g in columns [o_g, o_{g+1})) or [G, C, R].
GroupedQuantized groupedQuantize(const Tensor &x, const Tensor &scale,
                                 llvm::ArrayRef<int64_t> offsets,
                                 bool transpose, Fp8Kind kind);

/// te.grouped_scaled_matmul, rows form: scaledMatmul() of each segment of a
/// [T, K] and b[g] ([G, N, K]) with the scale inverses of group g ([G]
/// each), plus bias[g] ([G, N]) when given; the output [T, N].
Tensor groupedScaledMatmulRows(const Tensor &a, const Tensor &b,
                               const Tensor &aScaleInv, const Tensor &bScaleInv,
                               llvm::ArrayRef<int64_t> offsets,
                               const Tensor *bias);
/// te.grouped_scaled_matmul, contraction form: scaledMatmul() of columns
/// [o_g, o_{g+1}) of a [M, T] and b [N, T]; the output [G, M, N].
Tensor groupedScaledMatmulContraction(const Tensor &a, const Tensor &b,
                                      const Tensor &aScaleInv,
                                      const Tensor &bScaleInv,
                                      llvm::ArrayRef<int64_t> offsets);

//===----------------------------------------------------------------------===//
// GroupedLinear under Float8BlockScaling (GroupedBlockScalingKernels.cpp)
//
// Each group is cast and multiplied as te.block_quantize and te.scaled_matmul
// treat one matrix; the groups' scale inverses lie where
// dialects/GroupedBlockScaleLayout.h puts them. Segments are 16-aligned (the
// FP8 check of mSplitsError), so a segment's 1-D layout [ceil(K/128),
// pad4(m_g)] fills exactly its range of the segments layout.
//===----------------------------------------------------------------------===//

/// te.grouped_block_quantize: each group cast by blockQuantize() as its own
/// matrix. With `offsets`, x [T, K] in row segments, 1-D blocks: the output
/// is [T, K], or [K, T] with `transpose` (segment g in columns [o_g,
/// o_{g+1})), and the scale inverses are the segments (transposed segments)
/// layout. Without, x [G, R, C]: the output [G, R, C] ([G, C, R]) and the
/// stacked layout [G, s0, s1]. Padding rows (columns) and every scale no
/// group owns are 0.
BlockQuantized groupedBlockQuantize(const Tensor &x,
                                    llvm::ArrayRef<int64_t> offsets,
                                    int64_t blockDim, bool transpose,
                                    bool power2, Fp8Kind kind);

/// te.grouped_scaled_matmul with block scales, rows form: blockScaledMatmul()
/// of each segment of a [T, K] (1-D blocks, segments layout) and b[g]
/// ([G, N, K], `bScaling`-D blocks, stacked layout), plus bias[g] when
/// given; the output [T, N], rows past the segments 0.
Tensor groupedBlockScaledMatmulRows(const Tensor &a, const Tensor &b,
                                    const Tensor &aScaleInv,
                                    const Tensor &bScaleInv, int64_t bScaling,
                                    llvm::ArrayRef<int64_t> offsets,
                                    const Tensor *bias);
/// te.grouped_scaled_matmul with block scales, contraction form:
/// blockScaledMatmul() of columns [o_g, o_{g+1}) of a [M, T] and b [N, T],
/// both 1-D blocks in the transposed segments layout; the output [G, M, N],
/// 0 for an empty group.
Tensor groupedBlockScaledMatmulContraction(const Tensor &a, const Tensor &b,
                                           const Tensor &aScaleInv,
                                           const Tensor &bScaleInv,
                                           llvm::ArrayRef<int64_t> offsets);

} // namespace tejit::interp

#endif // TEJIT_COMPILER_INTERPRETER_KERNELS_H
