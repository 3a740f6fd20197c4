//===- AttentionLauncher.h - a plan's attention step on cuDNN ---*- C++ -*-===//
//
// Turns one te.attention / te.attention_bwd / te.kv_cache_attention plan
// step into a cuDNN flash attention call (with a post-scale bias or ALiBi,
// docs/attention-bias.md): reads the step's shapes and
// printed attributes once, at executor creation (where cuDNN's plan is
// built, or its refusal reported), and on each run launches the small prep
// kernel (padding mask -> sequence lengths, thd cu_seqlens -> lengths and
// ragged offsets, this site's dropout offset; with a kv cache, the new k and
// v tokens appended to the caches) and then cuDNN.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_ATTENTIONLAUNCHER_H
#define TEJIT_RUNTIME_ATTENTIONLAUNCHER_H

#include "runtime/Attention.h"
#include "runtime/ContextParallel.h"
#include "runtime/CudaDriver.h"
#include "runtime/Plan.h"

#include "llvm/ADT/ArrayRef.h"

#include <memory>
#include <optional>

namespace tejit::runtime {

/// The most new queries per sequence (max_seqlen_q) a kv_cache_attention
/// step may have to run on the decode kernels instead of cuDNN.
constexpr int64_t kDecodeMaxQueries = 16;

/// How many CTAs (splits) share each (sequence, kv head, row group)'s keys
/// on the decode kernels, fixed at create(). The chunk is each sequence's
/// own, computed on the device from its length: the visible keys divided by
/// `splits`, rounded up to the keys a CTA handles per step.
struct DecodeSplits {
  int64_t splits = 1;
};

/// Whether `problem`'s split pass runs on tensor cores
/// (tejit_decode_attention_mma: head dims 64 and 128) rather than on the
/// CUDA cores (tejit_decode_attention: the other head dims).
inline bool decodeUsesTensorCores(const AttentionProblem &problem) {
  return problem.headDim == 64 || problem.headDim == 128;
}

/// The entry points of runtime/kernels/DecodeAttention.cu for `problem`'s
/// caches: plain, paged with pages of a multiple of 16 rows (the
/// tensor-core pass reads the table once a 16-key tile), or other pages
/// (once a key); the CUDA-core pass has a plain and a paged kernel, the
/// combine is shared.
struct DecodeKernelNames {
  const char *splitTensorCores, *split, *combine;
};
inline DecodeKernelNames decodeKernelNames(const AttentionProblem &problem) {
  const char *combine = "tejit_decode_attention_combine";
  if (!problem.paged())
    return {"tejit_decode_attention_mma", "tejit_decode_attention", combine};
  return {problem.pageSize % 16 == 0 ? "tejit_decode_attention_mma_paged"
                                     : "tejit_decode_attention_mma_paged_keys",
          "tejit_decode_attention_paged", combine};
}

/// The decode kernels of runtime/kernels/DecodeAttention.cu for one kind of
/// cache (decodeKernelNames) and the device's SM count, which
/// decodeSplits() sizes the grid with.
struct DecodeKernels {
  CUfunction splitTensorCores = nullptr, split = nullptr, combine = nullptr;
  int64_t smCount = 0;

  /// The split pass `problem` runs on (null if not loaded).
  CUfunction splitFor(const AttentionProblem &problem) const {
    return decodeUsesTensorCores(problem) ? splitTensorCores : split;
  }
  /// Whether both of `problem`'s kernels are loaded.
  bool canRun(const AttentionProblem &problem) const {
    return splitFor(problem) && combine;
  }
};

class AttentionLauncher {
public:
  /// The problem `step` describes in `function` (the attributes the plan
  /// printed and the operand types), with a clear error for what tejit or
  /// cuDNN cannot run; builds cuDNN's plan. `prep` is the prep kernel. A
  /// kv_cache_attention step that prefers the decode kernels
  /// (decodeAttentionPreferred) runs on `decode` without cuDNN (none
  /// loaded, no version needed) when its kernels are given; other steps run
  /// on cuDNN, and an eligible one whose cuDNN plan cannot be built (no
  /// cuDNN, or one older than 9.7) runs on `decode` when given.
  static llvm::Expected<AttentionLauncher>
  create(const AttentionStep &step, const FunctionPlan &function,
         CUfunction prep, const DecodeKernels &decode = {});
  /// create() without cuDNN: reads the step into a problem (validated) and
  /// the operands' roles, and builds no plan (for tests: scratchBytes() and
  /// run() need create()'s, except on the decode path, whose splits parse()
  /// sizes for `smCount` SMs when it is positive).
  static llvm::Expected<AttentionLauncher> parse(const AttentionStep &step,
                                                 const FunctionPlan &function,
                                                 int64_t smCount = 0);
  /// The second half of create(): `parsed` (parse()'s, of a step of
  /// `function`) on cuDNN or the decode kernels, as create() says. For a
  /// caller that decides from the parsed step which kernels to load.
  static llvm::Expected<AttentionLauncher>
  complete(AttentionLauncher parsed, const FunctionPlan &function,
           CUfunction prep, const DecodeKernels &decode = {});

  /// Device scratch a run needs: the sequence lengths, the dropout state,
  /// thd's ragged offsets and cuDNN's workspace, or the decode kernels'
  /// partials (decodePartialBytes).
  size_t scratchBytes() const;

  /// Whether run() takes the decode kernels (a kv cache step with few new
  /// queries) instead of cuDNN, and how they split the cache.
  bool usesDecodeKernels() const { return decode; }
  /// Whether the decode kernels can run the step (decodeAttentionEligible):
  /// create()'s fallback when cuDNN cannot.
  bool decodeEligible() const { return eligible; }
  const DecodeSplits &decodeSplitsUsed() const { return splits; }

  /// Enqueues the step; `addresses` holds every value's address.
  llvm::Error run(llvm::ArrayRef<CUdeviceptr> addresses, CUdeviceptr scratch,
                  CUstream stream, const CudaDriver &driver) const;

  const AttentionProblem &problem() const { return problemDesc; }
  /// Context parallelism (docs/context-parallel.md, runtime/
  /// ContextParallel.h): how the step's local queries run, or null for a
  /// step without cp_ranks.
  const CpAttentionSplit *contextParallel() const {
    return cpSplit ? &*cpSplit : nullptr;
  }
  /// Whether run() needs setCpAccumulateKernel()'s kernel (the backward of
  /// a causal context-parallel step), and that kernel (runtime/kernels/
  /// AttentionPrep.cu's tejit_cp_accumulate).
  bool needsCpAccumulate() const {
    return cpSplit && !cpSplit->chunks.empty() && problemDesc.backward;
  }
  void setCpAccumulateKernel(CUfunction kernel) { cpAccumulate = kernel; }
  /// thd: the value ids of cu_seqlens_q and cu_seqlens_kv (q's when the
  /// step has one).
  std::optional<int64_t> cuSeqlensQValue() const { return cuSeqlensQ; }
  std::optional<int64_t> cuSeqlensKvValue() const { return cuSeqlensKv; }
  /// kv_cache_attention: the value ids of k_cache and v_cache, which run()
  /// writes in place (the new tokens appended).
  std::optional<int64_t> kCacheValue() const { return kCache; }
  std::optional<int64_t> vCacheValue() const { return vCache; }
  /// A paged kv_cache_attention: the value id of its page table.
  std::optional<int64_t> pageTableValue() const { return pageTable; }
  /// FP8 attention: the value ids of the step's scales, scale inverses and
  /// amaxes by te.fp8_attention(_bwd)'s operand and result names, in the
  /// order run() hands them to cuDNN (AttentionPointers); empty otherwise.
  std::vector<std::pair<std::string, int64_t>> fp8Roles() const;
  /// One FP8 scale, scale inverse or amax of te.fp8_attention(_bwd)
  /// (defined in AttentionLauncher.cpp, with the table of them).
  struct Fp8Role;

private:
  /// parse() of a kv_cache_attention step.
  static llvm::Expected<AttentionLauncher>
  parseKvCache(const AttentionStep &step, const FunctionPlan &function);

  /// run() of a causal context-parallel step: its two chunks.
  /// `lateRng`: the late chunk's dropout state (0 without dropout);
  /// `scratch` after the workspace: cpGradientBytes().
  llvm::Error runCpChunks(const AttentionPointers &pointers,
                          CUdeviceptr lateRng, CUdeviceptr workspace,
                          CUdeviceptr scratch, CUstream stream,
                          const CudaDriver &driver) const;
  /// The scratch for the partial dq, dk and dv of a causal
  /// context-parallel backward (needsCpAccumulate()), laid out as dq, dk and
  /// dv, each 256-byte aligned.
  size_t cpGradientBytes() const;
  /// The largest workspace of the step's runners.
  size_t workspaceBytes() const;

  llvm::Error runThd(llvm::ArrayRef<CUdeviceptr> addresses,
                     AttentionPointers &pointers, CUdeviceptr scratch,
                     CUstream stream, const CudaDriver &driver) const;

  AttentionProblem problemDesc;
  std::shared_ptr<const AttentionRunner> runner;
  CUfunction prep = nullptr;
  /// A kv cache step on the decode kernels (no runner then); `eligible`:
  /// one they could run.
  bool decode = false, eligible = false;
  DecodeSplits splits;
  DecodeKernels decodeKernels;
  // Value ids of the step's operands and results.
  int64_t q = 0, k = 0, v = 0, out = 0, stats = 0;
  int64_t gradOut = 0, gradQ = 0, gradK = 0, gradV = 0;
  std::optional<int64_t> mask, queryMask, rng, cuSeqlensQ, cuSeqlensKv;
  std::optional<int64_t> kCache, vCache, pageTable;
  /// A post-scale bias, ALiBi's slopes (an operand each) and dbias (the
  /// backward's fourth result).
  std::optional<int64_t> bias, alibiSlopes, gradBias;
  /// FP8 attention's scale, scale-inverse and amax values (one f32 each):
  /// the step's role table entry (AttentionLauncher.cpp's fp8RoleTable,
  /// which also names their AttentionPointers field) and value id, in
  /// te.fp8_attention(_bwd)'s operand and result order; empty on other
  /// steps.
  std::vector<std::pair<const Fp8Role *, int64_t>> fp8;
  uint64_t offsetDelta = 0;
  /// Context parallelism: the split (problemDesc is its first()).
  std::optional<CpAttentionSplit> cpSplit;
  /// Per chunk of a causal split: the forward's runner, or the backward's
  /// (visible: null when the chunk has no keys before its diagonal).
  struct CpChunkRunners {
    std::shared_ptr<const AttentionRunner> forward, visible, diagonal;
  };
  std::vector<CpChunkRunners> cpRunners;
  CUfunction cpAccumulate = nullptr;
  /// Cross-attention (s_q != s_kv, or pad_keys_only) with a key padding
  /// mask and no query mask: every query is valid, so cuDNN gets s_q as
  /// each query length.
  bool fullQueryLengths = false;
  /// Bytes of the output (forward) or dq (backward) to zero before cuDNN
  /// runs with a query mask: padded queries' rows are 0.
  size_t zeroedBytes = 0;
};

/// The PTX of runtime/kernels/AttentionPrep.cu.
const char *attentionPrepPtx();

/// Where a thd attention's prep reads and writes (see enqueueThdPrep).
struct ThdPrepBuffers {
  /// int32 [batch + 1] each; a null cuSeqlensKv takes cuSeqlensQ's.
  CUdeviceptr cuSeqlensQ = 0, cuSeqlensKv = 0;
  /// thdPrepBytes(problem) bytes, 256-byte aligned: the sequence lengths
  /// and ragged offsets cuDNN reads.
  CUdeviceptr scratch = 0;
  /// Optional: the dropout state (seed, offset) copied from rngIn to rngOut
  /// with the offset moved on by rngOffsetDelta.
  CUdeviceptr rngIn = 0, rngOut = 0;
  uint64_t rngOffsetDelta = 0;
  /// kv cache (required then): the step's new k and v tokens, [t, kv_heads,
  /// d] rows the problem's token strides k and v apart (0: packed), which
  /// are appended to the caches pointers.k and pointers.v point at;
  /// cuSeqlensKv counts each sequence's tokens in all (cached + new).
  CUdeviceptr newK = 0, newV = 0;
  /// Paged kv cache (required then): the caller's int32 [batch, s_kv /
  /// page_size] page table. The prep appends through it and leaves a copy
  /// with every id clamped into [0, pages) in the scratch, which
  /// pointers.pageTable then points at for the attention.
  CUdeviceptr pageTable = 0;
};

/// The scratch enqueueThdPrep needs for `problem` (a multiple of 256).
size_t thdPrepBytes(const AttentionProblem &problem);

/// Enqueues the one launch of the prep kernel `prep` (tejit_attention_prep)
/// that a thd `problem` needs before its runner runs: sequence lengths from
/// cu_seqlens differences and every ragged tensor's offsets (cu_seqlens
/// times its token stride), clamped on the device so that bad cu_seqlens
/// cannot send cuDNN out of bounds, and the rows no sequence covers (a
/// packed buffer's tail) of o (forward) or dq, dk and dv (backward) zeroed.
/// With a kv cache: L_i = cu_kv[i + 1] - cu_kv[i] clamped to [0, s_kv], n_i
/// = cu_q[i + 1] - cu_q[i] clamped to [0, min(s_q, L_i)] (entries clamped
/// to be non-negative, cu_q's to [0, t]), ragged offsets for q and o only,
/// and new token j < n_i of sequence i (k and v rows cu_q[i] + j) copied to
/// row L_i - n_i + j of sequence i's caches. Points `pointers`' lengths and
/// ragged offsets into buffers.scratch; its o or gradQ/K/V (and with a kv
/// cache its k and v, the caches) must already be set. Captures into a CUDA
/// graph.
llvm::Error enqueueThdPrep(const AttentionProblem &problem, CUfunction prep,
                           const ThdPrepBuffers &buffers,
                           AttentionPointers &pointers, CUstream stream,
                           const CudaDriver &driver);

/// The PTX of runtime/kernels/DecodeAttention.cu.
const char *decodeAttentionPtx();

/// Whether the decode kernels can run `problem`: a valid kv cache problem
/// with max_seqlen_q at most kDecodeMaxQueries (bf16 or f16, head dim a
/// multiple of 8 up to 128, padding or padding_causal_bottom_right: what
/// validate() allows) and a grid within CUDA's limits. The environment is
/// not read here.
bool decodeAttentionEligible(const AttentionProblem &problem);
/// The cache rows (S, max_sequence_length) from which an eligible step
/// prefers the decode kernels to cuDNN. The runtime cannot see a step's key
/// count L (it lives on the device, and a graph replays the step with
/// others). On an H200 (benchmarks/RESULTS.md, session 20; prep + attention,
/// b 8, h 32, g 8, d 128) the decode kernels take 18.9 us at L 32 and 128
/// against cuDNN's 15.7 and 25.5, then win more the longer L (21 against 25
/// us at 512, 42 against 70 at 3072, 141 against 309 at 16384; one sequence:
/// 39 against 298 us at 16384); a cache of S rows fills from 0 to S, so
/// from S = 256 on a decode's average step wins.
constexpr int64_t kDecodePreferredCacheRows = 256;

/// TEJIT_DECODE_ATTENTION: unset (or anything else), steps choose by their
/// cache rows; "0" keeps every step on cuDNN; "1" sends every eligible
/// step to the decode kernels (A/B timing, the check).
enum class DecodeChoice { ByCacheRows, Never, Always };
DecodeChoice decodeAttentionChoice();
/// Whether `problem` runs on the decode kernels under `choice`: eligible,
/// and (ByCacheRows) with at least kDecodePreferredCacheRows cache rows.
bool decodeAttentionPreferred(const AttentionProblem &problem,
                              DecodeChoice choice);

/// The splits of a decode problem for a device of `smCount` SMs, from b,
/// g and the row groups (not from S or the lengths): as many as fill every
/// resident CTA slot once (the split kernel's launch bounds: 3 CTAs an SM
/// on tensor cores, 4 otherwise),
/// so that all of a step's CTAs run at once with equal work; at least 1, at
/// most 64. Fixed per problem: a replay with other lengths uses the same
/// grid, and each sequence's chunk follows its own length on the device.
DecodeSplits decodeSplits(const AttentionProblem &problem, int64_t smCount);

/// The fp32 partials of the split pass, 256-byte aligned: (max, sum) and
/// o[d] per (sequence, head, query j < s_q, split).
size_t decodePartialBytes(const AttentionProblem &problem,
                          const DecodeSplits &splits);

/// What runs a kv cache step's attention after its prep: cuDNN's `runner`
/// (its workspace: runner->workspaceBytes()), or, without one, the decode
/// kernels with `splits` (workspace: decodePartialBytes()).
struct KvCacheEngine {
  const AttentionRunner *runner = nullptr;
  DecodeKernels decode;
  DecodeSplits splits;
};

/// Enqueues a kv_cache_attention problem as AttentionLauncher::run does:
/// the prep kernel (enqueueThdPrep: lengths, offsets, the append, o's tail
/// rows), then cuDNN or the two decode kernels, reading the prep's clamped
/// lengths and offsets. `pointers` holds q, o and the caches (k, v);
/// `workspace` the engine's bytes, 256-byte aligned. Captures into a CUDA
/// graph (no host sync, nothing read back).
llvm::Error enqueueKvCacheAttention(const AttentionProblem &problem,
                                    CUfunction prep,
                                    const KvCacheEngine &engine,
                                    const ThdPrepBuffers &buffers,
                                    AttentionPointers &pointers,
                                    CUdeviceptr workspace, CUstream stream,
                                    const CudaDriver &driver);

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_ATTENTIONLAUNCHER_H
