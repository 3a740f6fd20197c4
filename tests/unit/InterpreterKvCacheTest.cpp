//===- InterpreterKvCacheTest.cpp - attention over a KV cache -------------===//
//
// te.kv_cache_attention (docs/kv-cache-plan.md) against a float64 reference
// written here from the definition (each new query over its sequence's
// cached keys followed by the new ones, bottom-right causal or not), with
// the caches it stores into; the errors for sequences that do not fit the
// cache; a TransformerLayer decoding through its cache (prefill, then
// one token a sequence) against the same layer run without a cache on the
// whole sequences, for the layer op and for its decomposition; and the same
// layer over paged caches (docs/paged-kv-cache.md) against the non-paged
// one, step by step, with the error for a page id out of the pool.
//
//===----------------------------------------------------------------------===//
#include "InterpreterTestUtils.h"
#include "PipelineTestUtils.h"

#include <map>

using namespace tejit;
using namespace tejit::testing;

namespace {

/// One KV-cache step: per sequence, the tokens cached before it and the new
/// ones it brings, packed in `tokens` (the rest a tail).
struct CacheStep {
  std::vector<int64_t> cached, fresh;
  int64_t tokens, rows, maxNew, heads = 4, groups = 2, dim = 4;

  int64_t batch() const { return int64_t(fresh.size()); }

  std::string module(mlir::te::AttnMaskType mask) const {
    return substitute(
        R"mlir(
func.func @step(%q: $Q, %k: $KV, %v: $KV, %kc: $CACHE, %vc: $CACHE,
                %cq: $SEQ, %ckv: $SEQ) -> $Q {
  %o = te.kv_cache_attention %q, %k, %v, %kc, %vc cu_seqlens_q(%cq)
      cu_seqlens_kv(%ckv) {attn_mask_type = #te.attn_mask_type<$MASK>,
      softmax_scale = 0.5 : f64, max_seqlen_q = $MAX : i64}
      : ($Q, $KV, $KV, $CACHE, $CACHE, $SEQ, $SEQ) -> $Q
  return %o : $Q
}
)mlir",
        {{"Q", tensorType({tokens, heads, dim}, "bf16")},
         {"KV", tensorType({tokens, groups, dim}, "bf16")},
         {"CACHE", tensorType({batch(), rows, groups, dim}, "bf16")},
         {"SEQ", tensorType({batch() + 1}, "i32")},
         {"MASK", mlir::te::stringifyAttnMaskType(mask).str()},
         {"MAX", std::to_string(maxNew)}});
  }

  /// cu_seqlens_q and cu_seqlens_kv.
  void fillSequences(Tensor &cuQ, Tensor &cuKv) const {
    cuQ.data[0] = cuKv.data[0] = 0;
    for (int64_t i = 0; i < batch(); ++i) {
      cuQ.data[i + 1] = cuQ.data[i] + double(fresh[i]);
      cuKv.data[i + 1] = cuKv.data[i] + double(cached[i] + fresh[i]);
    }
  }
};

/// Key or value row `r` of sequence `i` after the step: cached, or new.
const double *rowAfterStep(const Tensor &cache, const Tensor &fresh,
                           const CacheStep &c, int64_t firstNew, int64_t i,
                           int64_t r) {
  int64_t width = c.groups * c.dim;
  if (r < c.cached[i])
    return cache.data.data() + (i * c.rows + r) * width;
  return fresh.data.data() + (firstNew + r - c.cached[i]) * width;
}

/// The definition: softmax(q k^T * 0.5) v over each sequence's rows after
/// the step, hiding rows past the query's position when causal.
Tensor reference(const std::vector<Tensor> &args, const CacheStep &c,
                 bool causal) {
  const Tensor &q = args[0], &k = args[1], &v = args[2];
  Tensor out = Tensor::zeros(q.shape);
  int64_t first = 0;
  for (int64_t i = 0; i < c.batch(); ++i) {
    int64_t length = c.cached[i] + c.fresh[i];
    for (int64_t j = 0; j < c.fresh[i]; ++j)
      for (int64_t h = 0; h < c.heads; ++h) {
        int64_t g = h / (c.heads / c.groups);
        const double *qi = q.data.data() + ((first + j) * c.heads + h) * c.dim;
        int64_t visible = causal ? c.cached[i] + j + 1 : length;
        std::vector<double> scores(visible);
        double max = -INFINITY;
        for (int64_t r = 0; r < visible; ++r) {
          const double *kr =
              rowAfterStep(args[3], k, c, first, i, r) + g * c.dim;
          double dot = 0;
          for (int64_t d = 0; d < c.dim; ++d)
            dot += qi[d] * kr[d];
          scores[r] = 0.5 * dot;
          max = std::max(max, scores[r]);
        }
        double sum = 0;
        for (double &s : scores)
          sum += (s = std::exp(s - max));
        double *o = out.data.data() + ((first + j) * c.heads + h) * c.dim;
        for (int64_t r = 0; r < visible; ++r) {
          const double *vr =
              rowAfterStep(args[4], v, c, first, i, r) + g * c.dim;
          for (int64_t d = 0; d < c.dim; ++d)
            o[d] += scores[r] / sum * vr[d];
        }
      }
    first += c.fresh[i];
  }
  return out;
}

class KvCacheAttentionTest
    : public InterpreterTest,
      public ::testing::WithParamInterface<mlir::te::AttnMaskType> {};

} // namespace

TEST_P(KvCacheAttentionTest, NewTokensAttendToTheirCachedSequence) {
  // A prefill (nothing cached), a decode step, a sequence with nothing new
  // and a chunk of 3 after 3 cached, in 10 tokens (a 4-token tail).
  CacheStep c{{0, 6, 4, 3}, {2, 1, 0, 3}, 10, 8, 3};
  mlir::func::FuncOp step = parse(c.module(GetParam()), "step");
  std::vector<Tensor> args = randomArgs(step);
  c.fillSequences(args[5], args[6]);
  std::vector<Tensor> updated;
  interp::Options options;
  options.updatedArguments = &updated;
  std::vector<Tensor> outs = run(step, args, options);
  ASSERT_EQ(outs.size(), 1u);
  bool causal =
      GetParam() == mlir::te::AttnMaskType::padding_causal_bottom_right;
  EXPECT_TRUE(allClose(outs[0], reference(args, c, causal), 1e-12));

  // The caches hold the new tokens after the cached ones; nothing else
  // moved.
  ASSERT_EQ(updated.size(), args.size());
  int64_t width = c.groups * c.dim, first = 0;
  for (int cache : {3, 4}) {
    Tensor expected = args[cache];
    const Tensor &fresh = args[cache - 2];
    first = 0;
    for (int64_t i = 0; i < c.batch(); ++i) {
      std::copy_n(fresh.data.begin() + first * width, c.fresh[i] * width,
                  expected.data.begin() + (i * c.rows + c.cached[i]) * width);
      first += c.fresh[i];
    }
    EXPECT_EQ(updated[cache].data, expected.data) << "cache " << cache;
  }
  // The tail's rows are 0.
  for (int64_t at = first * c.heads * c.dim; at < int64_t(outs[0].data.size());
       ++at)
    ASSERT_EQ(outs[0].data[at], 0.0) << at;
}

INSTANTIATE_TEST_SUITE_P(
    Masks, KvCacheAttentionTest,
    ::testing::Values(mlir::te::AttnMaskType::padding,
                      mlir::te::AttnMaskType::padding_causal_bottom_right),
    [](const auto &info) {
      return mlir::te::stringifyAttnMaskType(info.param).str();
    });

TEST_F(InterpreterTest, KvCacheSequencesMustFitTheCache) {
  CacheStep c{{0, 6}, {2, 1}, 4, 8, 3};
  mlir::func::FuncOp step =
      parse(c.module(mlir::te::AttnMaskType::padding), "step");
  std::vector<Tensor> args = randomArgs(step);
  c.fillSequences(args[5], args[6]);
  args[6].data[2] = 12; // the second sequence: 10 tokens, past 8 rows
  EXPECT_NE(runFailing(step, args).find("at most the cache's 8 rows"),
            std::string::npos);
  c.fillSequences(args[5], args[6]);
  args[6].data[1] = 1; // fewer tokens in all than new ones
  EXPECT_NE(runFailing(step, args).find("at least its new tokens"),
            std::string::npos);
}

namespace {

/// A small TransformerLayer (GQA, rotary, RMSNorm, SwiGLU, no dropout) on
/// packed tokens; with `cacheRows`, through a KV cache of that many rows.
/// `paging` (e.g. ", page_size: 4, total_pages: 11") goes into kv_cache.
std::string layerSpec(int64_t seqLength, int64_t tokens,
                      std::optional<int64_t> cacheRows,
                      llvm::StringRef paging = "") {
  std::string spec = "name: decode\nparams_dtype: bf16\ninput_format: thd\n"
                     "batch_size: 3\nseq_length: " +
                     std::to_string(seqLength) +
                     "\ntokens: " + std::to_string(tokens) + "\n";
  if (cacheRows)
    spec += "kv_cache: {max_sequence_length: " + std::to_string(*cacheRows) +
            paging.str() + "}\n";
  return spec + R"yaml(layers:
  - type: TransformerLayer
    hidden_size: 32
    ffn_hidden_size: 64
    num_attention_heads: 4
    num_gqa_groups: 2
    self_attn_mask_type: padding_causal
    normalization: RMSNorm
    activation: swiglu
    rotary_pos_emb: true
    hidden_dropout: 0.0
    attention_dropout: 0.0
)yaml";
}

/// Decomposes `module`'s layer ops into primitive ops for inference, as
/// te-compile --inference does.
bool lowerForInference(mlir::ModuleOp module) {
  PipelineOptions options;
  options.training = false;
  options.stopAfter = Stage::Primitive;
  return runPipeline(module, options);
}

class KvCacheLayerTest : public InterpreterTest,
                         public ::testing::WithParamInterface<bool> {};

} // namespace

// Prefill all but each sequence's last token through the cache, then
// decode the last one: both steps' outputs must be the rows of the layer
// run without a cache on the whole sequences. GetParam(): run the layer op
// (false) or its decomposition into te.kv_cache_attention (true).
TEST_P(KvCacheLayerTest, DecodingMatchesTheWholeSequences) {
  std::vector<int64_t> lengths = {5, 9, 1};
  const int64_t rows = 12, hidden = 32, width = 8;
  auto cachedModule = importSpecText(context, layerSpec(8, 16, rows), "c");
  auto wholeModule = importSpecText(context, layerSpec(12, 24, {}), "w");
  ASSERT_TRUE(cachedModule && wholeModule);
  if (GetParam()) {
    ASSERT_TRUE(lowerForInference(*cachedModule));
    ASSERT_TRUE(lowerForInference(*wholeModule));
  }
  mlir::func::FuncOp cached = firstFunction(*cachedModule);
  mlir::func::FuncOp whole = firstFunction(*wholeModule);

  // Shared weights and per-position rotary angles.
  std::vector<Tensor> wholeArgs = randomLayerArgs(whole, rng);
  std::map<std::string, Tensor> parameters;
  for (unsigned i = 0; i < whole.getNumArguments(); ++i)
    if (whole.getArgAttr(i, "te.parameter"))
      parameters[argName(whole, i).str()] = wholeArgs[i];
  Tensor angles =
      interp::randomTensor(mlir::RankedTensorType::get(
                               {rows, width}, mlir::Float32Type::get(&context)),
                           rng);
  repeatAngles(angles, /*interleaved=*/false);
  Tensor input = wholeArgs[0];

  // The whole sequences, packed: token p of sequence i at row start + p.
  auto fill = [&](std::vector<Tensor> &args, mlir::func::FuncOp function,
                  const std::vector<int64_t> &first,
                  const std::vector<int64_t> &count) {
    for (unsigned a = 0; a < function.getNumArguments(); ++a) {
      std::string name = argName(function, a).str();
      if (parameters.count(name))
        args[a] = parameters[name];
    }
    int64_t row = 0;
    auto argNamed = [&](llvm::StringRef name) -> Tensor & {
      for (unsigned a = 0; a < function.getNumArguments(); ++a)
        if (argName(function, a) == name)
          return args[a];
      ADD_FAILURE() << "no argument " << name.str();
      return args[0];
    };
    Tensor &x = argNamed("input"), &freqs = argNamed("rotary_pos_emb");
    Tensor &cu = argNamed("cu_seqlens");
    std::fill(x.data.begin(), x.data.end(), 0.0);
    cu.data[0] = 0;
    int64_t wholeStart = 0;
    for (size_t i = 0; i < lengths.size(); ++i) {
      for (int64_t p = first[i]; p < first[i] + count[i]; ++p, ++row) {
        std::copy_n(input.data.begin() + (wholeStart + p) * hidden, hidden,
                    x.data.begin() + row * hidden);
        std::copy_n(angles.data.begin() + p * width, width,
                    freqs.data.begin() + row * width);
      }
      cu.data[i + 1] = double(row);
      wholeStart += lengths[i];
    }
  };
  std::vector<int64_t> zeros(3, 0), prefix, lasts, ones(3, 1);
  for (int64_t length : lengths) {
    prefix.push_back(length - 1);
    lasts.push_back(length - 1);
  }
  fill(wholeArgs, whole, zeros, lengths);
  std::vector<Tensor> expected = run(whole, wholeArgs);
  ASSERT_EQ(expected.size(), 1u);

  std::vector<Tensor> args = randomLayerArgs(cached, rng);
  for (unsigned a = 0; a < cached.getNumArguments(); ++a)
    if (argName(cached, a).ends_with("_cache"))
      std::fill(args[a].data.begin(), args[a].data.end(), 0.0);
  auto setLengths = [&](const std::vector<int64_t> &total) {
    for (unsigned a = 0; a < cached.getNumArguments(); ++a)
      if (argName(cached, a) == "cu_seqlens_kv")
        for (size_t i = 0; i < total.size(); ++i)
          args[a].data[i + 1] = args[a].data[i] + double(total[i]);
  };
  std::vector<Tensor> updated;
  interp::Options options;
  options.updatedArguments = &updated;
  // Prefill: tokens [0, length - 1).
  fill(args, cached, zeros, prefix);
  setLengths(prefix);
  std::vector<Tensor> prefill = run(cached, args, options);
  ASSERT_EQ(prefill.size(), 1u);
  // Decode: the last token of each sequence, with the caches kept.
  for (unsigned a = 0; a < cached.getNumArguments(); ++a)
    if (argName(cached, a).ends_with("_cache"))
      args[a] = updated[a];
  fill(args, cached, lasts, ones);
  setLengths(lengths);
  std::vector<Tensor> decode = run(cached, args, options);
  ASSERT_EQ(decode.size(), 1u);

  // Compare row by row.
  int64_t wholeStart = 0, prefillRow = 0;
  for (size_t i = 0; i < lengths.size(); ++i) {
    for (int64_t p = 0; p < lengths[i]; ++p) {
      bool last = p == lengths[i] - 1;
      const Tensor &got = last ? decode[0] : prefill[0];
      int64_t row = last ? int64_t(i) : prefillRow++;
      for (int64_t h = 0; h < hidden; ++h)
        ASSERT_NEAR(got.data[row * hidden + h],
                    expected[0].data[(wholeStart + p) * hidden + h], 1e-9)
            << "sequence " << i << " position " << p << " feature " << h;
    }
    wholeStart += lengths[i];
  }
}

INSTANTIATE_TEST_SUITE_P(LayerOrDecomposed, KvCacheLayerTest,
                         ::testing::Values(false, true), [](const auto &info) {
                           return info.param ? "decomposed" : "layer_op";
                         });

namespace {

/// Paged caches: pages of 4 rows, 3 a sequence (12 rows), from a pool of 11,
/// handed out in a shuffled order. Sequence 2 never reaches its second and
/// third pages, whose entries hold junk: they must not be read.
constexpr int64_t kPageSize = 4, kPages = 11, kRows = 12;
const std::vector<std::vector<double>> kPageTable = {
    {7, 2, 9}, {0, 10, 4}, {5, 99, -1}};

/// The paged and the non-paged program of one layer, with shared weights,
/// run through the same steps.
class PagedLayerTest : public KvCacheLayerTest {
protected:
  mlir::func::FuncOp flat, paged;
  std::vector<Tensor> flatArgs, pagedArgs;

  void SetUp() override {
    flatModule = importSpecText(context, layerSpec(6, 16, kRows), "flat");
    pagedModule = importSpecText(
        context,
        layerSpec(6, 16, kRows,
                  ", page_size: " + std::to_string(kPageSize) +
                      ", total_pages: " + std::to_string(kPages)),
        "paged");
    ASSERT_TRUE(flatModule && pagedModule);
    if (GetParam()) {
      ASSERT_TRUE(lowerForInference(*flatModule));
      ASSERT_TRUE(lowerForInference(*pagedModule));
    }
    flat = firstFunction(*flatModule);
    paged = firstFunction(*pagedModule);
    flatArgs = randomLayerArgs(flat, rng);
    pagedArgs = randomLayerArgs(paged, rng);
    // Empty caches, the table, and the non-paged program's other inputs.
    for (unsigned a = 0; a < paged.getNumArguments(); ++a) {
      llvm::StringRef name = argName(paged, a);
      if (name.ends_with("_cache"))
        std::fill(pagedArgs[a].data.begin(), pagedArgs[a].data.end(), 0.0);
      else if (name == "page_table")
        for (int64_t i = 0; i < 3; ++i)
          std::copy(kPageTable[i].begin(), kPageTable[i].end(),
                    pagedArgs[a].data.begin() + i * 3);
      else
        pagedArgs[a] = flatArgs[indexOf(flat, name)];
    }
    for (unsigned a = 0; a < flat.getNumArguments(); ++a)
      if (argName(flat, a).ends_with("_cache"))
        std::fill(flatArgs[a].data.begin(), flatArgs[a].data.end(), 0.0);
  }

  static unsigned indexOf(mlir::func::FuncOp function, llvm::StringRef name) {
    for (unsigned a = 0; a < function.getNumArguments(); ++a)
      if (argName(function, a) == name)
        return a;
    ADD_FAILURE() << "no argument " << name.str();
    return 0;
  }

  /// Sets both programs' input (new random tokens) and sequences: `fresh`
  /// new tokens each, `total` in all after the step.
  void setStep(const std::vector<int64_t> &fresh,
               const std::vector<int64_t> &total) {
    Tensor &input = flatArgs[indexOf(flat, "input")];
    input = randomLike(input.shape, 0.5);
    Tensor &cuQ = flatArgs[indexOf(flat, "cu_seqlens")];
    Tensor &cuKv = flatArgs[indexOf(flat, "cu_seqlens_kv")];
    cuQ.data[0] = cuKv.data[0] = 0;
    for (size_t i = 0; i < fresh.size(); ++i) {
      cuQ.data[i + 1] = cuQ.data[i] + double(fresh[i]);
      cuKv.data[i + 1] = cuKv.data[i] + double(total[i]);
    }
    for (llvm::StringRef name : {"input", "cu_seqlens", "cu_seqlens_kv"})
      pagedArgs[indexOf(paged, name)] = flatArgs[indexOf(flat, name)];
  }

  /// Runs `function` on `args` and keeps the caches it updated.
  std::vector<Tensor> runStep(mlir::func::FuncOp function,
                              std::vector<Tensor> &args) {
    std::vector<Tensor> updated;
    interp::Options options;
    options.updatedArguments = &updated;
    std::vector<Tensor> outs = run(function, args, options);
    for (unsigned a = 0; a < function.getNumArguments(); ++a)
      if (argName(function, a).ends_with("_cache") && a < updated.size())
        args[a] = updated[a];
    return outs;
  }

private:
  mlir::OwningOpRef<mlir::ModuleOp> flatModule, pagedModule;
};

} // namespace

// A prefill, a step where some sequences bring nothing, and a chunked
// step: the paged program's outputs are the non-paged one's, and its pages
// hold the non-paged caches' rows where the table says.
TEST_P(PagedLayerTest, PagedDecodingMatchesNonPaged) {
  const std::vector<std::vector<int64_t>> fresh = {
      {3, 6, 1}, {1, 0, 1}, {1, 3, 0}};
  std::vector<int64_t> total(3, 0);
  for (const std::vector<int64_t> &step : fresh) {
    for (size_t i = 0; i < step.size(); ++i)
      total[i] += step[i];
    setStep(step, total);
    std::vector<Tensor> expected = runStep(flat, flatArgs);
    std::vector<Tensor> got = runStep(paged, pagedArgs);
    ASSERT_EQ(expected.size(), 1u);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_TRUE(allClose(got[0], expected[0], 1e-12));
  }
  const int64_t width = 2 * 8; // kv heads * head_dim
  for (llvm::StringRef name : {"layers.0.key_cache", "layers.0.value_cache"}) {
    const Tensor &flatCache = flatArgs[indexOf(flat, name)];
    const Tensor &pagedCache = pagedArgs[indexOf(paged, name)];
    ASSERT_EQ(llvm::ArrayRef<int64_t>(pagedCache.shape),
              llvm::ArrayRef<int64_t>({kPages, kPageSize, 2, 8}));
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t r = 0; r < total[i]; ++r) {
        auto page = int64_t(kPageTable[i][r / kPageSize]);
        int64_t pagedRow = page * kPageSize + r % kPageSize;
        for (int64_t e = 0; e < width; ++e)
          ASSERT_EQ(pagedCache.data[pagedRow * width + e],
                    flatCache.data[(i * kRows + r) * width + e])
              << name.str() << " sequence " << i << " row " << r;
      }
  }
}

// A page id out of the pool in an entry the step touches is an error that
// names the sequence and the entry.
TEST_P(PagedLayerTest, PageOutOfThePoolIsAnError) {
  setStep({3, 1, 1}, {3, 9, 1});
  pagedArgs[indexOf(paged, "page_table")].data[1 * 3 + 2] = double(kPages);
  EXPECT_NE(runFailing(paged, pagedArgs)
                .find("page_table[1, 2] = 11 (the page of sequence 1's rows "
                      "from 8) is not a page in [0, 11)"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(LayerOrDecomposed, PagedLayerTest,
                         ::testing::Values(false, true), [](const auto &info) {
                           return info.param ? "decomposed" : "layer_op";
                         });
