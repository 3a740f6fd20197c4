//===- Attention.cpp - fused flash attention through cuDNN ----------------===//
//
// A runner owns one problem's cuDNN operation graph (AttentionGraph.cpp) and
// the execution plan of the first engine configuration cuDNN's heuristics
// offer that finalizes (mode A, then the fallback list). Runners are cached
// per (CUDA context, problem) for the life of the process, like cuDNN's
// handles, one per context: the plan is bound to its handle.
//
// Running sets the stream on the context's handle and executes with a
// variant pack of the caller's pointers, the workspace buffers the graph
// keeps for itself and the host addresses of its by-value scalars. Handle
// state (the stream) is shared, so executions on one context take turns.
// Nothing allocates device memory or synchronizes; the only other work is
// a few 32-bit memsets of the workspace for older cuDNN versions.
//
//===----------------------------------------------------------------------===//
#include "runtime/Attention.h"

#include "runtime/AttentionEngines.h"
#include "runtime/AttentionGraph.h"
#include "runtime/CudaDriver.h"
#include "runtime/Cudnn.h"
#include "runtime/DeviceBuffer.h"

#include "dialects/AlibiSlopes.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>

using namespace tejit::runtime;
using llvm::Error;
using llvm::Expected;

//===----------------------------------------------------------------------===//
// Problems
//===----------------------------------------------------------------------===//

llvm::StringRef tejit::runtime::attentionMaskName(AttentionMask mask) {
  switch (mask) {
  case AttentionMask::None:
    return "none";
  case AttentionMask::Causal:
    return "causal";
  case AttentionMask::Padding:
    return "padding";
  case AttentionMask::PaddingCausal:
    return "padding_causal";
  case AttentionMask::PaddingCausalBottomRight:
    return "padding_causal_bottom_right";
  case AttentionMask::CausalBottomRight:
    return "causal_bottom_right";
  }
  return "?";
}

llvm::StringRef tejit::runtime::attentionLayoutName(AttentionLayout layout) {
  switch (layout) {
  case AttentionLayout::Sbhd:
    return "sbhd";
  case AttentionLayout::Bshd:
    return "bshd";
  case AttentionLayout::Thd:
    return "thd";
  }
  return "?";
}

std::vector<float> tejit::runtime::vanillaAlibiSlopes(int64_t heads) {
  std::vector<float> slopes;
  for (int64_t k = 0; k < heads; ++k)
    slopes.push_back(alibi::vanillaSlope(k, heads));
  return slopes;
}

std::string AttentionProblem::biasShapeName() const {
  return std::string(biasBatch == 1 ? "1" : "b") +
         (biasHeads == 1 ? "1" : "h") + "ss";
}

namespace {
/// " bias=1hss grad", " alibi=heads" or "": the bias part of key().
std::string biasKey(const AttentionProblem &p) {
  switch (p.bias) {
  case AttentionBias::None:
    return "";
  case AttentionBias::PostScale:
    return " bias=" + p.biasShapeName() + (p.biasGrad ? " grad" : "");
  case AttentionBias::Alibi:
    switch (p.alibiSlopes) {
    case AlibiSlopes::None:
      return " alibi=vanilla";
    case AlibiSlopes::Heads:
      return " alibi=heads";
    case AlibiSlopes::BatchHeads:
      return " alibi=batch_heads";
    }
  }
  return " bias=?";
}

/// The bias's and ALiBi's own checks (docs/attention-bias.md).
Error validateBias(const AttentionProblem &p) {
  auto unsupported = [&](const llvm::Twine &why) {
    return makeError(ErrorCode::Unsupported, p.key() + ": " + why);
  };
  bool any = p.bias != AttentionBias::None;
  if (p.biasGrad && p.bias != AttentionBias::PostScale)
    return unsupported("a bias gradient needs a post-scale bias (ALiBi "
                       "slopes take no gradient)");
  if (p.alibiSlopes != AlibiSlopes::None && p.bias != AttentionBias::Alibi)
    return unsupported("ALiBi slopes need the alibi bias type");
  if (any && p.kvCache)
    return unsupported("a bias or ALiBi is not supported with a kv cache");
  if (any && p.thd())
    return unsupported("a bias or ALiBi is not supported with the thd layout "
                       "(packed sequences)");
  if (p.bias != AttentionBias::PostScale)
    return Error::success();
  if ((p.biasBatch != 1 && p.biasBatch != p.batch) ||
      (p.biasHeads != 1 && p.biasHeads != p.heads))
    return unsupported(llvm::formatv(
        "a bias of shape [{0}, {1}, s_q, s_kv] does not broadcast: its first "
        "two dims must be 1 or the batch ({2}) and 1 or the heads ({3})",
        p.biasBatch, p.biasHeads, p.batch, p.heads));
  if (p.biasGrad && !p.backward)
    return unsupported("a bias gradient comes from the backward");
  if (p.biasGrad && (p.biasBatch != 1 || p.biasHeads != p.heads))
    return unsupported("a bias gradient is supported for the bias shape 1hss "
                       "([1, h, s_q, s_kv]) only, not " +
                       p.biasShapeName() + " (cuDNN's limit)");
  return Error::success();
}

/// The shortest decimal form that reads back as `value`.
std::string exactDouble(double value) {
  for (int precision = 6; precision < 17; ++precision) {
    std::string text =
        llvm::formatv("{0}", llvm::format("%.*g", precision, value)).str();
    if (std::strtod(text.c_str(), nullptr) == value)
      return text;
  }
  return llvm::formatv("{0}", llvm::format("%.17g", value)).str();
}

/// The kv cache's own checks, before the thd layout's.
Error validateKvCache(const AttentionProblem &p) {
  auto unsupported = [&](const llvm::Twine &why) {
    return makeError(ErrorCode::Unsupported, p.key() + ": " + why);
  };
  if (!p.thd())
    return unsupported("a kv cache takes thd queries (q [t, h, d] packed by "
                       "cu_seqlens_q)");
  if (p.backward)
    return unsupported("a kv cache is for inference: there is no backward");
  if (p.dropout != 0.0)
    return unsupported("a kv cache is for inference: dropout must be 0");
  if (p.windowLeft >= 0 || p.windowRight >= 0)
    return unsupported("a kv cache takes no sliding window");
  if (p.mask != AttentionMask::Padding &&
      p.mask != AttentionMask::PaddingCausalBottomRight)
    return unsupported("a kv cache takes the mask type padding or "
                       "padding_causal_bottom_right, not " +
                       attentionMaskName(p.mask));
  // A sequence's new tokens are among its cached ones (n_i <= L_i <= s_kv).
  if (p.seqQ > p.seqKv)
    return unsupported(llvm::formatv(
        "max_seqlen_q ({0}) exceeds the cache's {1} rows: a sequence's new "
        "tokens are among its cached ones",
        p.seqQ, p.seqKv));
  const AttentionProblem::TokenStrides &t = p.tokenStrides;
  if (t.gradQ || t.gradK || t.gradV)
    return unsupported("a kv cache has no gradients to give strides");
  if (p.pageSize < 0 || (p.paged() && p.pages <= 0))
    return unsupported("a paged kv cache needs a positive page size and "
                       "number of pages");
  if (p.paged() && p.seqKv % p.pageSize != 0)
    return unsupported(llvm::formatv(
        "a paged kv cache's {0} rows a sequence must be whole pages of {1}",
        p.seqKv, p.pageSize));
  return Error::success();
}

/// The thd layout's own checks, after validate()'s common ones.
Error validateThd(const AttentionProblem &p) {
  auto unsupported = [&](const llvm::Twine &why) {
    return makeError(ErrorCode::Unsupported, p.key() + ": " + why);
  };
  // cuDNN takes ragged offsets only with the padding pattern: the sequence
  // lengths come with it (cudnn-frontend refuses ragged tensors without).
  if (!p.padding())
    return unsupported("the thd layout needs a padding mask type (padding or "
                       "padding_causal): cuDNN reads each sequence's length "
                       "from it");
  if (p.tokensQ <= 0 || p.tokensKv <= 0)
    return unsupported("the thd layout needs the token counts of q and k/v "
                       "(t, t_kv) to be positive");
  // The offsets are int32 elements: a sequence starting at the last token of
  // the widest tensor must still fit.
  const AttentionProblem::TokenStrides &t = p.tokenStrides;
  auto width = [&](int64_t stride, int64_t count) {
    return stride ? stride : count * p.headDim;
  };
  int64_t widestQ = std::max({width(t.q, p.heads), width(t.gradQ, p.heads),
                              p.heads * p.headDim}),
          widestKv =
              std::max({width(t.k, p.kvHeads), width(t.v, p.kvHeads),
                        width(t.gradK, p.kvHeads), width(t.gradV, p.kvHeads)});
  constexpr int64_t int32Max = std::numeric_limits<int32_t>::max();
  if (p.tokensQ > int32Max / widestQ || p.tokensKv > int32Max / widestKv)
    return unsupported(llvm::formatv(
        "{0} query tokens of {1} elements or {2} key tokens of {3} elements "
        "do not fit the int32 element offsets of cuDNN's ragged tensors",
        p.tokensQ, widestQ, p.tokensKv, widestKv));
  return Error::success();
}
} // namespace

std::string AttentionProblem::key() const {
  std::string text =
      llvm::formatv(
          "{0} {1} {2} b={3} h={4} kv_heads={5} s_q={6} "
          "s_kv={7} d={8} mask={9} scale={10} dropout={11}",
          std::string(fp8 ? "fp8_" : "") +
              (backward ? "attention_bwd" : "attention"),
          elementTypeName(element),
          attentionLayoutName(layout).str() + (kvCache ? " kv_cache" : ""),
          batch, heads, kvHeads, seqQ, seqKv, headDim, attentionMaskName(mask),
          exactDouble(softmaxScale), exactDouble(dropout))
          .str();
  if (paged())
    text +=
        llvm::formatv(" paged pages={0} page_size={1}", pages, pageSize).str();
  if (windowLeft >= 0 || windowRight >= 0)
    text += llvm::formatv(" window={0},{1}", windowLeft, windowRight).str();
  if (bufferRowsQ || bufferRowsKv)
    text += llvm::formatv(" rows={0},{1}", rowsQ(), rowsKv()).str();
  text += biasKey(*this);
  if (fp8 && backward)
    text += (" grad=" + elementTypeName(gradElement)).str();
  const TokenStrides &t = tokenStrides;
  for (auto [name, stride] :
       {std::pair{"q", t.q}, std::pair{"k", t.k}, std::pair{"v", t.v},
        std::pair{"dq", t.gradQ}, std::pair{"dk", t.gradK},
        std::pair{"dv", t.gradV}})
    if (stride)
      text += llvm::formatv(" {0}_stride={1}", name, stride).str();
  return text;
}

namespace {
/// What FP8 attention (cuDNN's FP8 flash attention) takes of a problem: the
/// element types, and none of the features its graphs do not have.
Error validateFp8(const AttentionProblem &p) {
  auto unsupported = [&](const llvm::Twine &why) {
    return makeError(ErrorCode::Unsupported,
                     p.key() + ": FP8 attention " + why);
  };
  if (p.element != ElementType::F8E4M3)
    return unsupported("takes q, k, v and o in f8E4M3FN, got " +
                       elementTypeName(p.element));
  if (p.backward && p.gradElement != ElementType::F8E4M3 &&
      p.gradElement != ElementType::F8E5M2)
    return unsupported("takes dO, dq, dk and dv in f8E4M3FN or f8E5M2, got " +
                       elementTypeName(p.gradElement));
  if (p.headDim % 16 != 0)
    return unsupported(llvm::formatv(
        "needs a head dim that is a multiple of 16, got {0}", p.headDim));
  if (p.bias != AttentionBias::None)
    return unsupported("does not support an attention bias or ALiBi");
  if (p.thd() || p.kvCache)
    return unsupported("does not support the thd layout or a kv cache");
  if (p.windowLeft >= 0 || p.windowRight >= 0)
    return unsupported("does not support a sliding window");
  if (p.bottomRight())
    return unsupported("does not support the bottom-right causal mask");
  // cuDNN 9.19's FP8 forward engine accepts a graph with the bf16 path's
  // dropout (Philox mask and scale before amax_s) and then faults with an
  // illegal address (measured on an H200, session 30).
  if (p.dropout > 0)
    return unsupported("does not support attention dropout (cuDNN's FP8 "
                       "engines fault on it): set attention_dropout to 0, "
                       "or run the attention in bf16 (fp8_dpa=False)");
  return Error::success();
}
} // namespace

Error AttentionProblem::validate() const {
  auto unsupported = [&](const llvm::Twine &why) {
    return makeError(ErrorCode::Unsupported, key() + ": " + why);
  };
  if (fp8) {
    if (Error error = validateFp8(*this))
      return error;
  } else if (element != ElementType::BF16 && element != ElementType::F16) {
    return unsupported("element type " + elementTypeName(element) +
                       " is not supported: cuDNN's fused attention takes "
                       "bf16 or f16 (or FP8 E4M3 as FP8 attention)");
  }
  if (batch <= 0 || heads <= 0 || kvHeads <= 0 || seqQ <= 0 || seqKv <= 0 ||
      headDim <= 0)
    return unsupported("batch, heads, kv_heads, s_q, s_kv and the head dim "
                       "must all be positive");
  // FP8 attention's forward takes head dims up to 256 (validateFp8For
  // limits Hopper's backward to 128).
  int64_t maxHeadDim = fp8 ? 256 : 128;
  if (headDim % 8 != 0 || headDim > maxHeadDim)
    return unsupported(llvm::formatv("head dim {0} is not supported: it must "
                                     "be a multiple of 8 and at most {1}",
                                     headDim, maxHeadDim));
  if (heads % kvHeads != 0)
    return unsupported(llvm::formatv("{0} heads cannot share {1} kv heads: "
                                     "heads must be a multiple of kv_heads",
                                     heads, kvHeads));
  if (!(dropout >= 0.0 && dropout < 1.0))
    return unsupported("dropout probability " + exactDouble(dropout) +
                       " is out of range: it must be in [0, 1)");
  if (!std::isfinite(softmaxScale) || softmaxScale == 0.0)
    return unsupported("the softmax scale must be finite and non-zero");
  if (paged() && !kvCache)
    return unsupported("a page table serves a kv cache only");
  // Before the window checks: a kv cache takes no window at all.
  if (kvCache)
    if (Error error = validateKvCache(*this))
      return error;
  if (windowLeft < -1 || windowRight < -1)
    return unsupported("window bounds must be >= -1 (-1: unbounded)");
  if ((windowLeft >= 0 || windowRight >= 0) && seqQ != seqKv)
    return unsupported("a sliding window needs as many queries as keys "
                       "(s_q == s_kv) on the cuDNN path");
  // cuDNN's fused engines before 9.21 know one right bound, the causal
  // diagonal: a shifted one (row + r >= column) finalizes on 9.19 but
  // computes wrong results (tejit-attention-check, session 14).
  if (windowRight >= 0 && !causal())
    return unsupported(llvm::formatv(
        "a right window bound of {0} is not supported: cuDNN's fused "
        "attention takes the causal diagonal as its only right bound (use "
        "window_size (left, 0) with a causal mask, or (left, -1))",
        windowRight));
  const TokenStrides &t = tokenStrides;
  for (auto [name, stride, count] :
       {std::tuple{"q", t.q, heads}, std::tuple{"k", t.k, kvHeads},
        std::tuple{"v", t.v, kvHeads}, std::tuple{"dq", t.gradQ, heads},
        std::tuple{"dk", t.gradK, kvHeads}, std::tuple{"dv", t.gradV, kvHeads}})
    if (stride != 0 && (stride < count * headDim || stride % 8 != 0))
      return unsupported(llvm::formatv(
          "the token stride of {0} ({1} elements) must hold its {2} heads of "
          "{3} and be a multiple of 8 (16 bytes)",
          name, stride, count, headDim));
  // Bottom-right alignment needs each sequence's lengths: the kv cache has
  // them (the other layouts could too, but nothing asks for it yet).
  if (mask == AttentionMask::PaddingCausalBottomRight && !kvCache)
    return unsupported("the mask type padding_causal_bottom_right is "
                       "supported with a kv cache only");
  if (mask == AttentionMask::CausalBottomRight &&
      (kvCache || thd() || seqKv < seqQ))
    return unsupported("the mask type causal_bottom_right needs the sbhd or "
                       "bshd layout and at least as many keys as queries");
  if ((bufferRowsQ && bufferRowsQ < seqQ) ||
      (bufferRowsKv && bufferRowsKv < seqKv) ||
      ((bufferRowsQ || bufferRowsKv) && (thd() || kvCache)))
    return unsupported(llvm::formatv(
        "buffer rows ({0} and {1}) must hold s_q and s_kv, with the sbhd or "
        "bshd layout",
        bufferRowsQ, bufferRowsKv));
  if (Error error = validateBias(*this))
    return error;
  if (thd())
    return validateThd(*this);
  return Error::success();
}

namespace {
/// "9.10.2" from cudnnGetVersion()'s 91002.
std::string versionText(int64_t version) {
  return llvm::formatv("{0}.{1}.{2}", version / 10000, version / 100 % 100,
                       version % 100)
      .str();
}

/// An Unsupported error: `what` needs cuDNN `needed` or newer.
Error needsCudnn(const AttentionProblem &p, int64_t version, const char *needed,
                 const llvm::Twine &what) {
  return makeError(ErrorCode::Unsupported,
                   llvm::formatv("{0}: {1} needs cuDNN {2} or newer (this is "
                                 "{3})",
                                 p.key(), what.str(), needed,
                                 versionText(version)));
}

/// An Unsupported error: `what` needs `gpu` ("a Hopper or newer GPU").
Error needsGpu(const AttentionProblem &p, int64_t capability,
               const llvm::Twine &what, const char *gpu) {
  return makeError(ErrorCode::Unsupported,
                   llvm::formatv("{0}: {1} needs {2} (this is sm_{3})", p.key(),
                                 what.str(), gpu, capability));
}

/// What the thd layout (and a kv cache) needs of cuDNN and the GPU.
Error validateThdFor(const AttentionProblem &p, int64_t version,
                     int64_t capability) {
  // Transformer Engine's fused-attention backend table: thd with a padding
  // mask from 9.1, with GQA/MQA or a sliding window from 9.6 (cudnn-frontend
  // also refuses ragged GQA backward graphs before 9.6).
  if (version < 90100)
    return needsCudnn(p, version, "9.1.0", "the thd layout (ragged offsets)");
  // Transformer Engine's table: thd queries over bshd keys (mixed formats),
  // and padding_causal_bottom_right at any length, from 9.7.
  if (p.kvCache && version < 90700)
    return needsCudnn(p, version, "9.7.0",
                      "a kv cache (thd queries over bshd k/v caches)");
  if (version < 90600 && p.kvHeads != p.heads)
    return needsCudnn(p, version, "9.6.0",
                      "the thd layout with kv_heads < heads");
  if (version < 90600 && (p.windowLeft >= 0 || p.windowRight >= 0))
    return needsCudnn(p, version, "9.6.0",
                      "the thd layout with a sliding window");
  // cudnn-frontend: ragged offsets run on Hopper and newer only, until 9.18.1
  // brought them to Ampere and Ada.
  if (capability < 90 && version < 91801)
    return needsGpu(p, capability, "the thd layout (ragged offsets)",
                    "a Hopper or newer GPU before cuDNN 9.18.1");
  return Error::success();
}

/// What a post-scale bias, its gradient and ALiBi need of cuDNN and the GPU:
/// Transformer Engine's fused-attention table and cudnn-frontend's sdpa
/// support checks, conservatively.
Error validateBiasFor(const AttentionProblem &p, int64_t version,
                      int64_t capability) {
  if (p.bias == AttentionBias::None)
    return Error::success();
  // TE: a post-scale bias on Ampere and newer from cuDNN 9.0, ALiBi on
  // Hopper and newer only.
  if (p.bias == AttentionBias::PostScale && capability < 80)
    return needsGpu(p, capability, "a post-scale bias",
                    "an Ampere or newer GPU");
  if (p.bias == AttentionBias::Alibi && capability < 90)
    return needsGpu(p, capability, "ALiBi", "a Hopper or newer GPU");
  // Per-batch slopes [b, h, 1, 1] in the graph build and run, but the
  // engines read them wrong (every output off, measured on an H200 with
  // cuDNN 9.x, session 29); [h] slopes are right. tejit.pytorch passes
  // per-batch ALiBi as the bias it makes, as Transformer Engine does for
  // the caller's slopes.
  if (p.alibiSlopes == AlibiSlopes::BatchHeads && p.batch > 1)
    return makeError(ErrorCode::Unsupported,
                     p.key() + ": per-batch ALiBi slopes [b, h] are not "
                               "supported on cuDNN's fused attention (its "
                               "engines compute them wrong); give [h] "
                               "slopes, or the ALiBi bias [b, h, s_q, "
                               "s_kv] as a post_scale_bias");
  // cudnn-frontend: a sliding window with a bias or ALiBi only from 9.10.2.
  if (version < 91002 && (p.windowLeft >= 0 || p.windowRight >= 0))
    return needsCudnn(p, version, "9.10.2",
                      "a sliding window with a bias or ALiBi");
  // cudnn-frontend: dbias with sequence lengths (the padding pattern) or
  // lengths off 64 only from 9.5. The backward graph takes the padding
  // pattern also for s_kv % 128 != 0 before 9.16 (AttentionGraph.cpp).
  if (p.biasGrad && version < 90500 &&
      (p.padding() || p.seqQ % 64 != 0 || p.seqKv % 128 != 0))
    return needsCudnn(p, version, "9.5.0",
                      "a bias gradient with a padding mask, s_q not a "
                      "multiple of 64 or s_kv not a multiple of 128");
  return Error::success();
}
} // namespace

namespace {
/// What FP8 attention needs of cuDNN and the GPU (cudnn-frontend's sdpa_fp8
/// checks): cuDNN 9.1 on Hopper or newer, and on Hopper a backward with a
/// head dim of exactly 128.
Error validateFp8For(const AttentionProblem &p, int64_t version,
                     int64_t capability) {
  if (version < 90100)
    return needsCudnn(p, version, "9.1.0", "FP8 attention");
  if (capability < 90)
    return needsGpu(p, capability, "FP8 attention", "a Hopper or newer GPU");
  if (p.backward && capability < 100 && p.headDim != 128)
    return makeError(
        ErrorCode::Unsupported,
        llvm::formatv("{0}: the FP8 attention backward on Hopper needs a head "
                      "dim of 128 (cuDNN's FP8 engines), got {1}",
                      p.key(), p.headDim));
  return Error::success();
}
} // namespace

Error AttentionProblem::validateFor(int64_t cudnnVersion,
                                    int64_t computeCapability) const {
  if (fp8)
    return validateFp8For(*this, cudnnVersion, computeCapability);
  if (thd())
    if (Error error = validateThdFor(*this, cudnnVersion, computeCapability))
      return error;
  return validateBiasFor(*this, cudnnVersion, computeCapability);
}

//===----------------------------------------------------------------------===//
// Handles
//===----------------------------------------------------------------------===//

namespace {
/// One cuDNN handle per CUDA context, and the lock its stream is set under.
struct Handle {
  cudnnHandle_t handle = nullptr;
  std::mutex mutex;
};

/// The handle of the current context, created on first use. Handles are
/// never destroyed: the runners that use them live as long as the process,
/// and destroying one at exit would race the driver's own teardown.
Expected<Handle *> handleFor(const Cudnn &lib, CUcontext context) {
  static std::mutex mutex;
  static std::map<CUcontext, std::unique_ptr<Handle>> handles;
  std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Handle> &entry = handles[context];
  if (entry)
    return entry.get();
  auto handle = std::make_unique<Handle>();
  if (cudnnStatus_t status = lib.cudnnCreate(&handle->handle);
      status != CUDNN_STATUS_SUCCESS) {
    handles.erase(context);
    return lib.error(status,
                     llvm::formatv("cudnnCreate (cuDNN {0}, {1})",
                                   lib.versionString(), lib.path),
                     ErrorCode::Unsupported);
  }
  entry = std::move(handle);
  return entry.get();
}
} // namespace

//===----------------------------------------------------------------------===//
// Execution plans
//===----------------------------------------------------------------------===//

struct AttentionRunner::Impl {
  const Cudnn *lib = nullptr;
  Handle *handle = nullptr;
  AttentionProblem problem;
  attention::Graph graph;
  BackendDescriptor engineConfig;
  BackendDescriptor plan;
  /// cuDNN's workspace, after the graph's own buffers.
  size_t cudnnWorkspaceBytes = 0;
  AttentionEngineConfig config;
  const char *heuristicMode = "";
  /// ALiBi without the caller's slopes: TE's vanilla slopes, f32 [h],
  /// uploaded once when the runner is built.
  DeviceBuffer vanillaSlopes;
  /// FP8: attention::fp8Constants.
  DeviceBuffer fp8Constants;
};

namespace {
/// Makes the execution plan of `config` (finalized, from heuristics or
/// buildEngineConfig) the runner's, taking `config` over. False, with cuDNN's
/// reason in `why` and `config` left to the caller, if the plan does not
/// finalize.
Expected<bool> adoptPlan(AttentionRunner::Impl &impl, BackendDescriptor &config,
                         std::string &why) {
  const Cudnn &lib = *impl.lib;
  auto plan = BackendDescriptor::create(
      lib, CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "execution plan");
  if (!plan)
    return plan.takeError();
  cudnnBackendDescriptor_t raw = config.get();
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  cudnnStatus_t status = lib.cudnnBackendSetAttribute(
      plan->get(), CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
      &impl.handle->handle);
#pragma GCC diagnostic pop
  if (status == CUDNN_STATUS_SUCCESS)
    status = lib.cudnnBackendSetAttribute(
        plan->get(), CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw);
  if (status == CUDNN_STATUS_SUCCESS)
    status = lib.cudnnBackendFinalize(plan->get());
  if (status != CUDNN_STATUS_SUCCESS) {
    why = lib.statusText(status) + ": " + lib.lastErrorString();
    return false;
  }
  int64_t workspace = 0, count = 0;
  if (lib.cudnnBackendGetAttribute(
          plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
          CUDNN_TYPE_INT64, 1, &count, &workspace) != CUDNN_STATUS_SUCCESS ||
      count != 1 || workspace < 0)
    return makeError(ErrorCode::Internal,
                     "cuDNN did not report the execution plan's workspace "
                     "size");
  Expected<AttentionEngineConfig> described =
      attention::readEngineConfig(lib, raw);
  if (!described)
    return described.takeError();
  impl.cudnnWorkspaceBytes = static_cast<size_t>(workspace);
  impl.config = std::move(*described);
  impl.engineConfig = std::move(config);
  impl.plan = std::move(*plan);
  return true;
}

/// Tries the configurations heuristics `mode` offers for the graph, in
/// order, until an execution plan finalizes. `tried` collects why the
/// others did not. False if none did.
Expected<bool> tryHeuristic(AttentionRunner::Impl &impl,
                            cudnnBackendHeurMode_t mode, const char *modeName,
                            std::string &tried) {
  const Cudnn &lib = *impl.lib;
  auto configs = attention::heuristicConfigs(
      lib, impl.graph.operationGraph.get(), mode, modeName, tried);
  if (!configs)
    return configs.takeError();
  for (auto [rank, config] : llvm::enumerate(*configs)) {
    std::string why;
    Expected<bool> adopted = adoptPlan(impl, config, why);
    if (!adopted || *adopted) {
      if (adopted)
        impl.heuristicMode = modeName;
      return adopted;
    }
    // Which configuration it was, for the error if none plans.
    Expected<AttentionEngineConfig> described =
        attention::readEngineConfig(lib, config.get());
    tried +=
        llvm::formatv("\n  mode {0}, configuration {1} ({2}): {3}", modeName,
                      rank, described ? described->str() : "unreadable", why);
    llvm::consumeError(described.takeError());
  }
  return false;
}

Error makePlan(AttentionRunner::Impl &impl) {
  std::string tried;
  const std::pair<cudnnBackendHeurMode_t, const char *> modes[] = {
      {CUDNN_HEUR_MODE_A, "A"}, {CUDNN_HEUR_MODE_FALLBACK, "FALLBACK"}};
  for (auto [mode, name] : modes) {
    Expected<bool> found = tryHeuristic(impl, mode, name, tried);
    if (!found)
      return found.takeError();
    if (*found)
      return Error::success();
  }
  const Cudnn &lib = *impl.lib;
  return makeError(
      ErrorCode::Unsupported,
      llvm::formatv("cuDNN {0} ({1}) has no engine for {2}; what was "
                    "tried:{3}",
                    lib.versionString(), lib.path, impl.problem.key(), tried));
}

/// The plan of a caller's configuration.
Error makePlan(AttentionRunner::Impl &impl,
               const AttentionEngineConfig &config) {
  const Cudnn &lib = *impl.lib;
  Expected<BackendDescriptor> built = attention::buildEngineConfig(
      lib, impl.graph.operationGraph.get(), config);
  if (!built)
    return annotate(built.takeError(), impl.problem.key());
  std::string why;
  Expected<bool> adopted = adoptPlan(impl, *built, why);
  if (!adopted)
    return adopted.takeError();
  if (!*adopted)
    return makeError(ErrorCode::Unsupported,
                     llvm::formatv("{0}: cuDNN {1} cannot plan {2}: {3}",
                                   impl.problem.key(), lib.versionString(),
                                   config.str(), why));
  impl.heuristicMode = "caller's choice";
  return Error::success();
}

/// `values` in a buffer of the runner's own, copied from the host once (at
/// creation, so that runs stay capturable).
Expected<DeviceBuffer> uploadConstants(const std::vector<float> &values,
                                       const char *what) {
  size_t bytes = values.size() * sizeof(float);
  auto buffer = DeviceBuffer::allocate(bytes, what);
  if (!buffer)
    return buffer.takeError();
  auto driver = CudaDriver::get();
  if (!driver)
    return driver.takeError();
  if (Error error =
          driver->check(driver->cuMemcpyHtoDAsync(buffer->get(), values.data(),
                                                  bytes, nullptr),
                        llvm::Twine("uploading the ") + what))
    return std::move(error);
  if (Error error = driver->check(driver->cuStreamSynchronize(nullptr),
                                  llvm::Twine("uploading the ") + what))
    return std::move(error);
  return buffer;
}

/// Builds a problem's runner from scratch: graph, then the plan of `config`,
/// or of the heuristics' first configuration that plans when it is null.
Expected<std::unique_ptr<AttentionRunner::Impl>>
buildRunner(const Cudnn &lib, Handle *handle, const AttentionProblem &problem,
            const AttentionEngineConfig *config = nullptr) {
  auto impl = std::make_unique<AttentionRunner::Impl>();
  impl->lib = &lib;
  impl->handle = handle;
  impl->problem = problem;
  Expected<attention::Graph> graph =
      attention::buildGraph(lib, handle->handle, problem);
  if (!graph)
    return graph.takeError();
  impl->graph = std::move(*graph);
  if (Error error = config ? makePlan(*impl, *config) : makePlan(*impl))
    return std::move(error);
  if (problem.bias == AttentionBias::Alibi &&
      problem.alibiSlopes == AlibiSlopes::None) {
    auto slopes =
        uploadConstants(vanillaAlibiSlopes(problem.heads), "ALiBi slopes");
    if (!slopes)
      return annotate(slopes.takeError(), problem.key());
    impl->vanillaSlopes = std::move(*slopes);
  }
  if (problem.fp8) {
    auto buffer =
        uploadConstants(attention::fp8Constants(), "FP8 attention constants");
    if (!buffer)
      return annotate(buffer.takeError(), problem.key());
    impl->fp8Constants = std::move(*buffer);
  }
  return std::move(impl);
}
} // namespace

//===----------------------------------------------------------------------===//
// Runners
//===----------------------------------------------------------------------===//

AttentionRunner::AttentionRunner(std::unique_ptr<Impl> impl)
    : impl(std::move(impl)) {}
AttentionRunner::~AttentionRunner() = default;

const AttentionProblem &AttentionRunner::problem() const {
  return impl->problem;
}

size_t AttentionRunner::workspaceBytes() const {
  return impl->graph.workspaceBytes + impl->cudnnWorkspaceBytes;
}

std::string AttentionRunner::describeEngine() const {
  std::string text =
      llvm::formatv("cuDNN {0} ({1}), {2} (heuristics mode {3}), workspace {4} "
                    "bytes",
                    impl->lib->versionString(), impl->lib->path,
                    impl->config.str(), impl->heuristicMode, workspaceBytes());
  if (!impl->graph.notes.empty())
    text += "; " + impl->graph.notes;
  return text;
}

const AttentionEngineConfig &AttentionRunner::engineConfig() const {
  return impl->config;
}

std::string AttentionEngineConfig::str() const {
  std::string text = llvm::formatv("engine {0}", engine).str();
  if (!knobs.empty())
    text += ", knobs";
  for (auto [type, value] : knobs)
    text += llvm::formatv(" {0}={1}", type, value).str();
  return text;
}

namespace {
/// What every runner needs: a valid problem, the driver, a current context,
/// a usable cuDNN and its handle for the context.
struct Setup {
  const Cudnn *lib = nullptr;
  CUcontext context = nullptr;
};

/// The current context's device as 90 for sm_90.
Expected<int64_t> computeCapability(const CudaDriver &driver) {
  CUdevice device;
  int major = 0, minor = 0;
  if (Error error =
          driver.check(driver.cuCtxGetDevice(&device), "cuCtxGetDevice"))
    return std::move(error);
  for (auto [attribute, value] :
       {std::pair{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &major},
        std::pair{CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &minor}})
    if (Error error =
            driver.check(driver.cuDeviceGetAttribute(value, attribute, device),
                         "cuDeviceGetAttribute"))
      return std::move(error);
  return int64_t(major * 10 + minor);
}

Expected<Setup> setUp(const AttentionProblem &problem) {
  if (Error error = problem.validate())
    return std::move(error);
  auto driver = CudaDriver::get();
  if (!driver)
    return annotate(driver.takeError(), problem.key());
  Setup setup;
  if (Error error = driver->check(driver->cuCtxGetCurrent(&setup.context),
                                  "cuCtxGetCurrent"))
    return std::move(error);
  if (!setup.context)
    return makeError(ErrorCode::State,
                     problem.key() + ": no CUDA context is current on this "
                                     "thread (make a device current first)");
  auto lib = Cudnn::get();
  if (!lib)
    return annotate(lib.takeError(), problem.key());
  // cudnn-frontend refuses these for bf16/f16 attention: known bugs.
  if (lib->version == 91000 || lib->version == 91001)
    return makeError(ErrorCode::Unsupported,
                     llvm::formatv("{0}: cuDNN {1} ({2}) has known bugs in "
                                   "its fused attention; use 9.10.2 or newer",
                                   problem.key(), lib->versionString(),
                                   lib->path));
  // What this cuDNN and GPU can run of the problem (validateFor decides
  // which features need anything).
  Expected<int64_t> capability = computeCapability(*driver);
  if (!capability)
    return capability.takeError();
  if (Error error = problem.validateFor(int64_t(lib->version), *capability))
    return std::move(error);
  setup.lib = &*lib;
  return setup;
}
} // namespace

Expected<std::shared_ptr<const AttentionRunner>>
AttentionRunner::get(const AttentionProblem &problem) {
  Expected<Setup> setup = setUp(problem);
  if (!setup)
    return setup.takeError();
  static std::mutex mutex;
  static std::map<std::pair<CUcontext, std::string>,
                  std::shared_ptr<const AttentionRunner>>
      runners;
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(setup->context, problem.key());
  std::shared_ptr<const AttentionRunner> &entry = runners[key];
  if (entry)
    return entry;
  Expected<Handle *> handle = handleFor(*setup->lib, setup->context);
  if (!handle) {
    runners.erase(key);
    return handle.takeError();
  }
  Expected<std::unique_ptr<Impl>> impl =
      buildRunner(*setup->lib, *handle, problem);
  if (!impl) {
    runners.erase(key);
    return impl.takeError();
  }
  entry.reset(new AttentionRunner(std::move(*impl)));
  return entry;
}

Expected<std::unique_ptr<const AttentionRunner>>
AttentionRunner::create(const AttentionProblem &problem,
                        const AttentionEngineConfig &config) {
  Expected<Setup> setup = setUp(problem);
  if (!setup)
    return setup.takeError();
  Expected<Handle *> handle = handleFor(*setup->lib, setup->context);
  if (!handle)
    return handle.takeError();
  Expected<std::unique_ptr<Impl>> impl =
      buildRunner(*setup->lib, *handle, problem, &config);
  if (!impl)
    return impl.takeError();
  return std::unique_ptr<const AttentionRunner>(
      new AttentionRunner(std::move(*impl)));
}

Expected<std::vector<AttentionEngineConfig>>
AttentionRunner::candidates(const AttentionProblem &problem) {
  Expected<Setup> setup = setUp(problem);
  if (!setup)
    return setup.takeError();
  const Cudnn &lib = *setup->lib;
  Expected<Handle *> handle = handleFor(lib, setup->context);
  if (!handle)
    return handle.takeError();
  Expected<attention::Graph> graph =
      attention::buildGraph(lib, (*handle)->handle, problem);
  if (!graph)
    return graph.takeError();
  cudnnBackendDescriptor_t raw = graph->operationGraph.get();

  std::vector<AttentionEngineConfig> result;
  auto add = [&](AttentionEngineConfig config) {
    if (llvm::find(result, config) == result.end())
      result.push_back(std::move(config));
  };
  std::string tried;
  for (auto [mode, name] :
       {std::pair{CUDNN_HEUR_MODE_A, "A"}, std::pair{CUDNN_HEUR_MODE_B, "B"}}) {
    auto configs = attention::heuristicConfigs(lib, raw, mode, name, tried);
    if (!configs)
      return configs.takeError();
    for (const BackendDescriptor &config : *configs) {
      Expected<AttentionEngineConfig> described =
          attention::readEngineConfig(lib, config.get());
      if (!described)
        return described.takeError();
      add(std::move(*described));
    }
  }
  if (!result.empty()) {
    const AttentionEngineConfig first = result.front();
    auto knobs = attention::engineKnobs(lib, raw, first.engine);
    if (!knobs)
      return knobs.takeError();
    // Knob ranges can be wide (a kernel index, say); 64 values each at most.
    constexpr int64_t kMaxValuesPerKnob = 64;
    for (const attention::KnobRange &knob : *knobs) {
      int64_t stride = std::max<int64_t>(knob.stride, 1);
      for (int64_t value = knob.minimum, n = 0;
           value <= knob.maximum && n < kMaxValuesPerKnob;
           value += stride, ++n) {
        AttentionEngineConfig moved = first;
        auto it = llvm::find_if(moved.knobs,
                                [&](auto &k) { return k.first == knob.type; });
        if (it != moved.knobs.end())
          it->second = value;
        else
          moved.knobs.emplace_back(knob.type, value);
        add(std::move(moved));
      }
    }
  }
  Expected<int64_t> engines = attention::engineCount(lib, raw);
  if (!engines)
    return engines.takeError();
  for (int64_t engine = 0; engine < *engines; ++engine) {
    auto knobs = attention::engineKnobs(lib, raw, engine);
    if (!knobs) { // The engine does not take this graph.
      llvm::consumeError(knobs.takeError());
      continue;
    }
    AttentionEngineConfig config;
    config.engine = engine;
    add(std::move(config));
  }
  return result;
}

namespace {
/// The caller's pointer for `slot`, and its name for errors.
std::pair<CUdeviceptr, const char *> pointerFor(attention::Slot slot,
                                                const AttentionPointers &p) {
  using attention::Slot;
  switch (slot) {
  case Slot::Q:
    return {p.q, "q"};
  case Slot::K:
    return {p.k, "k"};
  case Slot::V:
    return {p.v, "v"};
  case Slot::O:
    return {p.o, "o"};
  case Slot::Stats:
    return {p.stats, "stats"};
  case Slot::GradO:
    return {p.gradO, "gradO"};
  case Slot::GradQ:
    return {p.gradQ, "gradQ"};
  case Slot::GradK:
    return {p.gradK, "gradK"};
  case Slot::GradV:
    return {p.gradV, "gradV"};
  case Slot::SeqLenQ:
    return {p.seqLenQ, "seqLenQ"};
  case Slot::SeqLenKv:
    return {p.seqLenKv, "seqLenKv"};
  case Slot::PageTable:
    return {p.pageTable, "pageTable"};
  case Slot::Seed:
    return {p.seed, "seed"};
  case Slot::Offset:
    return {p.offset, "offset"};
  case Slot::RaggedQ:
    return {p.raggedQ, "raggedQ"};
  case Slot::RaggedK:
    return {p.raggedK, "raggedK"};
  case Slot::RaggedV:
    return {p.raggedV, "raggedV"};
  case Slot::RaggedO:
    return {p.raggedO, "raggedO"};
  case Slot::RaggedGradQ:
    return {p.raggedGradQ, "raggedGradQ"};
  case Slot::RaggedGradK:
    return {p.raggedGradK, "raggedGradK"};
  case Slot::RaggedGradV:
    return {p.raggedGradV, "raggedGradV"};
  case Slot::Bias:
    return {p.bias, "bias"};
  case Slot::GradBias:
    return {p.gradBias, "gradBias"};
  case Slot::AlibiSlopes:
    return {p.alibiSlopes, "alibiSlopes"};
  case Slot::DescaleQkv:
    return {p.descaleQkv, "descaleQkv"};
  case Slot::ScaleO:
    return {p.scaleO, "scaleO"};
  case Slot::AmaxS:
    return {p.amaxS, "amaxS"};
  case Slot::AmaxO:
    return {p.amaxO, "amaxO"};
  case Slot::DescaleO:
    return {p.descaleO, "descaleO"};
  case Slot::DescaleGradO:
    return {p.descaleGradO, "descaleGradO"};
  case Slot::ScaleDp:
    return {p.scaleDp, "scaleDp"};
  case Slot::DescaleDp:
    return {p.descaleDp, "descaleDp"};
  case Slot::ScaleGradQkv:
    return {p.scaleGradQkv, "scaleGradQkv"};
  case Slot::AmaxDp:
    return {p.amaxDp, "amaxDp"};
  case Slot::AmaxGradQ:
    return {p.amaxGradQ, "amaxGradQ"};
  case Slot::AmaxGradK:
    return {p.amaxGradK, "amaxGradK"};
  case Slot::AmaxGradV:
    return {p.amaxGradV, "amaxGradV"};
  case Slot::ProbabilityScale:
  case Slot::ProbabilityDescale:
  case Slot::Workspace:
  case Slot::Host:
    break;
  }
  return {0, "?"};
}
} // namespace

namespace {
/// Whether a mask or window hides some scores of `p`.
bool masksScores(const AttentionProblem &p) {
  return p.mask != AttentionMask::None || p.windowLeft >= 0 ||
         p.windowRight >= 0;
}

/// The memsets before cuDNN runs: the graph's workspace fills, and dbias
/// where scores are masked (cuDNN's flash kernels may skip tiles that are
/// masked whole; dbias is 0 there).
Error clearBeforeRun(const AttentionProblem &p, const attention::Graph &graph,
                     const AttentionPointers &pointers, CUdeviceptr workspace,
                     CUstream stream) {
  bool clearGradBias = p.biasGrad && masksScores(p);
  if (graph.fills.empty() && !clearGradBias)
    return Error::success();
  auto driver = CudaDriver::get();
  if (!driver)
    return driver.takeError();
  for (const attention::WorkspaceFill &fill : graph.fills)
    if (Error error = driver->check(
            driver->cuMemsetD32Async(workspace + fill.offset, fill.value,
                                     fill.count, stream),
            "cuMemsetD32Async (attention workspace)"))
      return error;
  if (!clearGradBias)
    return Error::success();
  size_t bytes = size_t(p.heads * p.seqQ * p.seqKv) * 2; // bf16/f16
  return driver->check(
      driver->cuMemsetD8Async(pointers.gradBias, 0, bytes, stream),
      "zeroing dbias before the attention backward");
}
} // namespace

Error AttentionRunner::run(const AttentionPointers &pointers,
                           CUdeviceptr workspace, CUstream stream) const {
  using attention::Slot;
  const Cudnn &lib = *impl->lib;
  const attention::Graph &graph = impl->graph;
  auto invalid = [&](const llvm::Twine &why) {
    return makeError(ErrorCode::InvalidArgument,
                     impl->problem.key() + ": " + why);
  };
  if (workspaceBytes() > 0 && !workspace)
    return invalid(llvm::formatv("the workspace is null; {0} bytes needed",
                                 workspaceBytes()));
  if (workspace % 256 != 0)
    return invalid("the workspace must be 256-byte aligned");

  std::vector<int64_t> uids;
  std::vector<void *> data;
  uids.reserve(graph.bindings.size());
  data.reserve(graph.bindings.size());
  for (const attention::Binding &binding : graph.bindings) {
    void *address = nullptr;
    if (binding.slot == Slot::Workspace) {
      address = reinterpret_cast<void *>(workspace + binding.index);
    } else if (binding.slot == Slot::Host) {
      address = const_cast<uint32_t *>(&graph.hostScalars[binding.index]);
    } else if (binding.slot == Slot::AlibiSlopes && impl->vanillaSlopes.get()) {
      address = reinterpret_cast<void *>(impl->vanillaSlopes.get());
    } else if (binding.slot == Slot::ProbabilityScale ||
               binding.slot == Slot::ProbabilityDescale) {
      address =
          reinterpret_cast<void *>(impl->fp8Constants.get() +
                                   attention::fp8ConstantOffset(binding.slot));
    } else {
      auto [pointer, name] = pointerFor(binding.slot, pointers);
      if (!pointer)
        return invalid(llvm::Twine("pointer ") + name + " is null");
      address = reinterpret_cast<void *>(pointer);
    }
    uids.push_back(binding.uid);
    data.push_back(address);
  }

  if (Error error =
          clearBeforeRun(impl->problem, graph, pointers, workspace, stream))
    return error;

  void *cudnnWorkspace =
      impl->cudnnWorkspaceBytes
          ? reinterpret_cast<void *>(workspace + graph.workspaceBytes)
          : nullptr;
  auto pack = BackendDescriptor::create(
      lib, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
  if (!pack)
    return pack.takeError();
  if (Error error = lib.check(
          lib.cudnnBackendSetAttribute(
              pack->get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64,
              static_cast<int64_t>(uids.size()), uids.data()),
          "setting the variant pack's uids"))
    return error;
  if (Error error =
          lib.check(lib.cudnnBackendSetAttribute(
                        pack->get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                        CUDNN_TYPE_VOID_PTR, static_cast<int64_t>(data.size()),
                        data.data()),
                    "setting the variant pack's pointers"))
    return error;
  if (Error error =
          lib.check(lib.cudnnBackendSetAttribute(
                        pack->get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                        CUDNN_TYPE_VOID_PTR, 1, &cudnnWorkspace),
                    "setting the variant pack's workspace"))
    return error;
  if (Error error = lib.check(lib.cudnnBackendFinalize(pack->get()),
                              "finalizing the variant pack"))
    return error;

  std::lock_guard<std::mutex> lock(impl->handle->mutex);
  if (Error error =
          lib.check(lib.cudnnSetStream(impl->handle->handle,
                                       reinterpret_cast<cudaStream_t>(stream)),
                    "cudnnSetStream"))
    return error;
  if (cudnnStatus_t status = lib.cudnnBackendExecute(
          impl->handle->handle, impl->plan.get(), pack->get()))
    return lib.error(status, "cudnnBackendExecute for " + impl->problem.key(),
                     ErrorCode::Cuda);
  return Error::success();
}
