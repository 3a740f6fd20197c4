//===- Attention.h - fused flash attention through cuDNN --------*- C++ -*-===//
//
// Runs a plan's te.attention / te.attention_bwd steps with cuDNN's fused
// flash-attention engines (cuDNN 9 backend API, loaded with dlopen; see
// Cudnn.h). The cuDNN graphs are built in AttentionGraph.cpp; this header is
// the runner the executor uses.
//
// Tensors, per the te.attention op: q [s_q, b, h, d] (sbhd) or [b, s_q, h, d]
// (bshd); k, v with kv_heads heads in q's layout; o and dO in q's layout;
// stats f32 [b, h, s_q] (contiguous), the natural-log log-sum-exp of each
// row of scaled (and masked) scores; dq, dk, dv in q's, k's and v's layouts.
//
// thd (packed sequences): q, o, dO, dq [t, h, d] and k, v, dk, dv [t_kv,
// kv_heads, d], the tokens of b sequences back to back; s_q and s_kv are the
// longest sequence's lengths (max_seqlen) and stats stay [b, h, s_q], padded
// per sequence. cuDNN runs it as the padded bshd problem whose q/k/v/o (and
// gradient) descriptors carry ragged offsets: each sequence's first element.
//
// kv cache (kvCache, inference, docs/kv-cache-plan.md): q and o thd [t, h,
// d] as above; k and v are the caches [b, s_kv, kv_heads, d] (bshd, packed,
// s_kv their capacity), sequence i's keys the first seq_len_kv[i] rows of
// its cache. Forward only; the prep kernel appends the step's new k and v
// tokens to the caches before cuDNN reads them (enqueueThdPrep).
//
// Paged kv cache (docs/paged-kv-cache.md, Transformer Engine's is_paged):
// the caches are pools of pages [pages, page_size, kv_heads, d] and an int32
// page table [b, s_kv / page_size] says which page holds each sequence's
// rows: logical row r of sequence i is row r % page_size of page
// table[i][r / page_size]. The prep kernel appends through the table and
// writes a copy of it with every id clamped into [0, pages), which the
// attention reads (cuDNN's paged cache load, or the decode kernels).
//
// Buffer rows (context parallelism, docs/context-parallel.md): a problem may
// be a run over part of its buffers' rows. bufferRowsQ (q, o, dO, dq and the
// stats) and bufferRowsKv (k, v, dk, dv) are the positions each batch entry
// has in them (0: s_q and s_kv): the bshd batch stride and the stats' row
// stride follow them; the pointers point at the first row of the run.
//
// Bias (docs/attention-bias.md, Transformer Engine's core_attention_bias_type):
// a post-scale bias [1 or b, 1 or h, s_q, s_kv] (bf16/f16, q's type, packed)
// is added to the scaled scores before the masks; its gradient, dbias [1, h,
// s_q, s_kv] in the same type, is the gradient of the post-scale scores
// summed over the batch. ALiBi adds -slope[h] * |column - row - off| (off =
// s_kv - s_q, 0 for the causal and padding_causal masks), the slopes f32 [h]
// or [b, h], or TE's vanilla ones, which the runner keeps on the device.
//
// FP8 (docs/fp8-attention.md, Transformer Engine's fp8_dpa): q, k, v and o
// are FP8 E4M3 in the same layouts; dO, dq, dk and dv FP8 of gradElement
// (E5M2 under HYBRID, E4M3 under E4M3). Every scale, scale inverse and amax
// is one f32 on the device (a meta slot): the inputs are dequantized with
// their scale inverses, P (the softmax output) is cast to E4M3 inside the
// kernel with the fixed scale 448 (AttentionGraph.cpp says why) and o with
// scale_o; the backward casts dS with scale_dp and dq, dk, dv with
// scale_dqkv. amax_s = max P (the normalized probabilities), amax_o =
// max |o| (before its cast), amax_dp = max |dS * softmax scale|, and the
// gradients' amaxes before their casts.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_ATTENTION_H
#define TEJIT_RUNTIME_ATTENTION_H

#include "runtime/Plan.h"

#include <cuda.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tejit::runtime {

/// Padding masks hide, per batch entry, query rows at or past seq_len_q[b]
/// and keys at or past seq_len_kv[b]. The causal mask is top-left aligned:
/// query i sees keys j <= i; bottom-right aligned (the kv cache's), each
/// batch entry's diagonal ends at its last query and key: query i sees keys
/// j <= i + seq_len_kv[b] - seq_len_q[b]. CausalBottomRight is that
/// alignment without padding (every entry's lengths are s_q and s_kv):
/// query i sees keys j <= i + s_kv - s_q.
enum class AttentionMask {
  None,
  Causal,
  Padding,
  PaddingCausal,
  PaddingCausalBottomRight,
  CausalBottomRight
};
enum class AttentionLayout { Sbhd, Bshd, Thd };

/// What is added to the scaled scores: nothing, the caller's post-scale
/// bias tensor, or ALiBi's linear position penalty.
enum class AttentionBias { None, PostScale, Alibi };
/// ALiBi's slopes: TE's vanilla ones (None: no slopes operand; the runner
/// uploads vanillaAlibiSlopes(heads) once), or the caller's f32 [h] or
/// [b, h].
enum class AlibiSlopes { None, Heads, BatchHeads };

/// "none", "causal", "padding", "padding_causal",
/// "padding_causal_bottom_right", "causal_bottom_right".
llvm::StringRef attentionMaskName(AttentionMask mask);
/// "sbhd", "bshd", "thd".
llvm::StringRef attentionLayoutName(AttentionLayout layout);

/// Transformer Engine's vanilla ALiBi slopes of `heads` heads
/// (dialects/AlibiSlopes.h, which the interpreter shares).
std::vector<float> vanillaAlibiSlopes(int64_t heads);

struct AttentionProblem {
  int64_t batch = 0, heads = 0, kvHeads = 0, seqQ = 0, seqKv = 0, headDim = 0;
  ElementType element = ElementType::BF16; // BF16 or F16
  AttentionLayout layout = AttentionLayout::Sbhd;
  AttentionMask mask = AttentionMask::None;
  /// softmaxScale multiplies q.k; dropout is the probability of dropping a
  /// softmax weight, in [0, 1) (kept weights are scaled by 1 / (1 - p)).
  double softmaxScale = 1.0, dropout = 0.0;
  /// Sliding window (Transformer Engine's window_size): key j is visible to
  /// query i only if i - windowLeft <= j <= i + windowRight; -1 leaves a
  /// side unbounded. Needs s_q == s_kv; windowRight must be -1 (a causal
  /// mask is the right bound 0: AttentionLauncher maps one onto the other).
  int64_t windowLeft = -1, windowRight = -1;
  bool backward = false;
  /// Elements between consecutive tokens of q, k, v and (backward) their
  /// gradients; 0 means packed (heads * head dim). A fused QKV projection's
  /// output is read in place: q, k and v are column ranges of its rows.
  struct TokenStrides {
    int64_t q = 0, k = 0, v = 0, gradQ = 0, gradK = 0, gradV = 0;
  } tokenStrides;
  /// thd only: the rows (tokens) of q, o, dO and dq, and of k, v, dk and dv.
  /// They bound the sequences, not the cuDNN graph, so key() leaves them
  /// out: one plan serves every packed buffer size. With a kv cache, both
  /// count the step's new tokens (q's and those of k and v appended).
  int64_t tokensQ = 0, tokensKv = 0;
  /// thd queries over bshd k/v caches of s_kv rows (see the file comment);
  /// tokenStrides.k and .v are then the new tokens' strides.
  bool kvCache = false;
  /// Paged kv cache (see the file comment): the rows of a page and the
  /// pages of each cache; 0 for plain caches. s_kv is then the table's
  /// width times pageSize.
  int64_t pageSize = 0, pages = 0;
  /// The rows each batch entry has in the q-shaped buffers (q, o, dO, dq,
  /// stats) and the k-shaped ones (see the file comment); 0: s_q, s_kv.
  int64_t bufferRowsQ = 0, bufferRowsKv = 0;
  /// The post-scale bias or ALiBi (see the file comment). biasBatch and
  /// biasHeads are the bias's first two dims, each 1 or batch / heads;
  /// biasGrad (backward, the [1, h, s_q, s_kv] bias only) writes dbias.
  AttentionBias bias = AttentionBias::None;
  int64_t biasBatch = 1, biasHeads = 1;
  bool biasGrad = false;
  AlibiSlopes alibiSlopes = AlibiSlopes::None;
  /// FP8 attention (see the file comment): element is then F8E4M3, and
  /// gradElement the backward's dO / dq / dk / dv type.
  bool fp8 = false;
  ElementType gradElement = ElementType::F8E5M2;

  bool padding() const {
    return mask == AttentionMask::Padding ||
           mask == AttentionMask::PaddingCausal ||
           mask == AttentionMask::PaddingCausalBottomRight;
  }
  /// Either alignment of the causal diagonal.
  bool causal() const {
    return mask == AttentionMask::Causal ||
           mask == AttentionMask::PaddingCausal || bottomRight();
  }
  bool bottomRight() const {
    return mask == AttentionMask::PaddingCausalBottomRight ||
           mask == AttentionMask::CausalBottomRight;
  }
  /// The rows of a batch entry in the q-shaped and k-shaped buffers.
  int64_t rowsQ() const { return bufferRowsQ ? bufferRowsQ : seqQ; }
  int64_t rowsKv() const { return bufferRowsKv ? bufferRowsKv : seqKv; }
  bool thd() const { return layout == AttentionLayout::Thd; }
  bool paged() const { return pageSize > 0; }
  /// Entries of a sequence's page table row (s_kv / pageSize).
  int64_t pagesPerSequence() const { return paged() ? seqKv / pageSize : 0; }
  /// Whether ALiBi aligns top-left: under the causal and padding_causal
  /// masks, as in Transformer Engine (every other mask: bottom-right).
  bool alibiTopLeft() const {
    return mask == AttentionMask::Causal ||
           mask == AttentionMask::PaddingCausal;
  }
  /// ALiBi's `off`: s_kv - s_q (bottom-right alignment), 0 top-left.
  int64_t alibiOffset() const { return alibiTopLeft() ? 0 : seqKv - seqQ; }
  /// "1hss", "b1ss", "bhss" or "11ss" (TE's names): the bias's shape.
  std::string biasShapeName() const;

  /// Success, or an ErrorCode::Unsupported error naming the problem and
  /// what is out of range (element type, head dim, heads, dropout, ...).
  llvm::Error validate() const;
  /// What the loaded cuDNN (cudnnGetVersion()'s number, 91002 for 9.10.2)
  /// and the device (compute capability, 90 for sm_90) can run of a valid
  /// problem: an ErrorCode::Unsupported error naming the version needed
  /// (thd: 9.1, 9.6 with kv_heads < heads or a window; Hopper or newer
  /// before 9.18.1; a kv cache: 9.7; a bias: Ampere or newer, 9.10.2 with a
  /// sliding window, 9.5 for dbias with padding or lengths off the tiles;
  /// ALiBi: Hopper or newer).
  llvm::Error validateFor(int64_t cudnnVersion,
                          int64_t computeCapability) const;
  /// Everything that decides the cuDNN graph, readable and exact (doubles
  /// printed to round-trip): "attention_bwd bf16 sbhd b=2 h=8 kv_heads=2
  /// s_q=128 s_kv=128 d=64 mask=causal scale=0.125 dropout=0.1", then
  /// " window=L,R" when a window is set, " bias=1hss" (" grad" with dbias)
  /// or " alibi=vanilla" (heads, batch_heads) with a bias; "attention bf16
  /// thd kv_cache ..." for a kv cache (" paged pages=P page_size=S" when
  /// paged).
  std::string key() const;
};

/// Device pointers (CUdeviceptr). o and stats are outputs in the forward and
/// inputs in the backward. With a kv cache, k and v are the caches and stats
/// is unused (the graph keeps its statistics in the workspace); paged, k and
/// v are the page pools and pageTable the clamped int32 [b, s_kv /
/// page_size] table.
struct AttentionPointers {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0, stats = 0;
  CUdeviceptr gradO = 0, gradQ = 0, gradK = 0, gradV = 0; // backward only
  CUdeviceptr seqLenQ = 0, seqLenKv = 0; // int32 [batch], padding masks only
  CUdeviceptr pageTable = 0;             // paged kv cache only
  CUdeviceptr seed = 0, offset = 0;      // int64 scalars, dropout only
  /// thd only: int32 [batch + 1], where each sequence starts in q, k, v, o
  /// (and dO), dq, dk and dv, in elements: cu_seqlens times the tensor's
  /// token stride (enqueueThdPrep in AttentionLauncher.h writes them).
  CUdeviceptr raggedQ = 0, raggedK = 0, raggedV = 0, raggedO = 0;
  CUdeviceptr raggedGradQ = 0, raggedGradK = 0, raggedGradV = 0;
  /// A post-scale bias: the bias (q's type, [biasBatch, biasHeads, s_q,
  /// s_kv], packed) and, with biasGrad, dbias [1, h, s_q, s_kv]; ALiBi with
  /// the caller's slopes: f32 [h] or [b, h] (unused with vanilla slopes).
  CUdeviceptr bias = 0, gradBias = 0, alibiSlopes = 0;
  /// FP8 only, each one f32 (see the file comment). Forward: q, k and v
  /// share descaleQkv; scaleO casts o; amaxS and amaxO are written.
  /// Backward: descaleQkv, descaleO, descaleGradO, scaleDp / descaleDp, and
  /// scaleGradQkv for dq, dk and dv; amaxDp and amaxGradQ/K/V are written.
  CUdeviceptr descaleQkv = 0, scaleO = 0, amaxS = 0, amaxO = 0;
  CUdeviceptr descaleO = 0, descaleGradO = 0, scaleDp = 0, descaleDp = 0;
  CUdeviceptr scaleGradQkv = 0, amaxDp = 0, amaxGradQ = 0, amaxGradK = 0,
              amaxGradV = 0;
};

/// One way for cuDNN to run a problem: an engine of the problem's operation
/// graph (cuDNN's global index) and values for the engine's knobs (pairs of
/// cudnnBackendKnobType_t and value); knobs left out take the engine's
/// defaults.
struct AttentionEngineConfig {
  int64_t engine = -1;
  std::vector<std::pair<int64_t, int64_t>> knobs;

  /// "engine 8, knobs 24=7 2=1".
  std::string str() const;
  bool operator==(const AttentionEngineConfig &other) const {
    return engine == other.engine && knobs == other.knobs;
  }
};

class AttentionRunner {
public:
  /// Builds (or finds in a process-wide cache keyed by problem and CUDA
  /// context) the cuDNN operation graph and execution plan, for the CUDA
  /// context current on this thread. Errors: the problem's own (validate()),
  /// NoDevice without a driver or GPU, State without a current context,
  /// Unsupported without a usable cuDNN or when cuDNN has no engine for the
  /// problem (spelled out, with cuDNN's last error string).
  static llvm::Expected<std::shared_ptr<const AttentionRunner>>
  get(const AttentionProblem &problem);

  /// The configurations worth timing for `problem`: those cuDNN's
  /// heuristics offer (mode A, then B), then the first of them with one knob
  /// moved at a time through the knob's range, then the defaults of every
  /// other engine; each once. Not all of them finalize: create() says which
  /// do not. Errors as get().
  static llvm::Expected<std::vector<AttentionEngineConfig>>
  candidates(const AttentionProblem &problem);

  /// A runner for `problem` with `config`, outside get()'s cache (for
  /// benchmarks). ErrorCode::Unsupported, with cuDNN's message, when the
  /// configuration does not finalize for the problem.
  static llvm::Expected<std::unique_ptr<const AttentionRunner>>
  create(const AttentionProblem &problem, const AttentionEngineConfig &config);

  ~AttentionRunner();
  AttentionRunner(const AttentionRunner &) = delete;
  AttentionRunner &operator=(const AttentionRunner &) = delete;

  const AttentionProblem &problem() const;
  /// Device memory run() needs (256-byte aligned): cuDNN's workspace plus,
  /// in the backward, the f32 buffers its pattern keeps outside the graph.
  size_t workspaceBytes() const;
  /// "cuDNN 9.10.2 (/path/libcudnn.so.9), engine 8, heuristic mode A":
  /// what runs this problem, for logs.
  std::string describeEngine() const;
  /// The engine configuration this runner runs.
  const AttentionEngineConfig &engineConfig() const;

  /// Enqueues the attention on `stream` (null: the legacy default stream).
  /// No synchronization and no allocation, so it can be captured into a
  /// CUDA graph. Pointers must be non-null where the problem uses them
  /// (ErrorCode::InvalidArgument otherwise); `workspace` must hold
  /// workspaceBytes(), 256-byte aligned. With dbias under a mask (or
  /// window), dbias is zeroed first: its masked positions are 0 whether or
  /// not cuDNN writes them. Runs of one runner on several threads take
  /// turns (one cuDNN handle per context).
  llvm::Error run(const AttentionPointers &pointers, CUdeviceptr workspace,
                  CUstream stream) const;

  struct Impl;

private:
  explicit AttentionRunner(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_ATTENTION_H
