//===- InterpreterThdTest.cpp - te.attention on packed sequences ----------===//
//
// Packed sequences (qkv_format thd) against the same attention run one
// sequence at a time in bshd (checked against the definition by
// InterpreterTest's AttentionTest): outputs, statistics and gradients of
// every sequence, zeros for the padded tail, and the errors for offsets
// that do not describe packed sequences.
//
//===----------------------------------------------------------------------===//
#include "InterpreterTestUtils.h"

using namespace tejit;
using namespace tejit::testing;

namespace {

/// Packed problem: heads and groups of width `dim`, sequences of the given
/// lengths back to back in `tokens` (the rest a tail), at most `maxSeqlen`.
struct PackedCase {
  mlir::te::AttnMaskType maskType;
  std::vector<int64_t> lengths;
  int64_t tokens, maxSeqlen, heads = 4, groups = 2, dim = 4;

  int64_t batch() const { return int64_t(lengths.size()); }
  std::vector<int64_t> starts() const {
    std::vector<int64_t> result = {0};
    for (int64_t length : lengths)
      result.push_back(result.back() + length);
    return result;
  }

  std::string maskName() const {
    return mlir::te::stringifyAttnMaskType(maskType).str();
  }

  /// @fwd(q, k, v, cu) -> (o, lse) and @bwd(g, q, k, v, o, lse, cu) ->
  /// (dq, dk, dv) on the packed tokens.
  std::string packedModule() const {
    return substitute(
        R"mlir(
func.func @fwd(%q: $Q, %k: $KV, %v: $KV, %cu: $CU) -> ($Q, $LSE) {
  %o, %lse = te.attention %q, %k, %v cu_seqlens_q(%cu) $ATTRS
      : ($Q, $KV, $KV, $CU) -> ($Q, $LSE)
  return %o, %lse : $Q, $LSE
}
func.func @bwd(%g: $Q, %q: $Q, %k: $KV, %v: $KV, %o: $Q, %lse: $LSE,
               %cu: $CU) -> ($Q, $KV, $KV) {
  %dq, %dk, %dv = te.attention_bwd %g, %q, %k, %v, %o, %lse
      cu_seqlens_q(%cu) $ATTRS
      : ($Q, $Q, $KV, $KV, $Q, $LSE, $CU) -> ($Q, $KV, $KV)
  return %dq, %dk, %dv : $Q, $KV, $KV
}
)mlir",
        {{"Q", tensorType({tokens, heads, dim})},
         {"KV", tensorType({tokens, groups, dim})},
         {"LSE", tensorType({batch(), heads, maxSeqlen})},
         {"CU", tensorType({batch() + 1}, "i32")},
         {"ATTRS", "{attn_mask_type = #te.attn_mask_type<" + maskName() +
                       ">, qkv_format = #te.qkv_format<thd>, "
                       "softmax_scale = 0.5 : f64, "
                       "max_seqlen_q = " +
                       std::to_string(maxSeqlen) + " : i64, max_seqlen_kv = " +
                       std::to_string(maxSeqlen) + " : i64}"}});
  }

  /// The same functions on one sequence of `length` tokens (bshd, b = 1),
  /// causal when the packed mask type is.
  std::string sequenceModule(int64_t length) const {
    bool causal = maskType == mlir::te::AttnMaskType::padding_causal;
    return substitute(
        R"mlir(
func.func @fwd(%q: $Q, %k: $KV, %v: $KV) -> ($Q, $LSE) {
  %o, %lse = te.attention %q, %k, %v $ATTRS
      : ($Q, $KV, $KV) -> ($Q, $LSE)
  return %o, %lse : $Q, $LSE
}
func.func @bwd(%g: $Q, %q: $Q, %k: $KV, %v: $KV, %o: $Q, %lse: $LSE)
    -> ($Q, $KV, $KV) {
  %dq, %dk, %dv = te.attention_bwd %g, %q, %k, %v, %o, %lse $ATTRS
      : ($Q, $Q, $KV, $KV, $Q, $LSE) -> ($Q, $KV, $KV)
  return %dq, %dk, %dv : $Q, $KV, $KV
}
)mlir",
        {{"Q", tensorType({1, length, heads, dim})},
         {"KV", tensorType({1, length, groups, dim})},
         {"LSE", tensorType({1, heads, length})},
         {"ATTRS", std::string("{attn_mask_type = #te.attn_mask_type<") +
                       (causal ? "causal" : "no_mask") +
                       ">, qkv_format = #te.qkv_format<bshd>, "
                       "softmax_scale = 0.5 : f64}"}});
  }
};

/// Rows [first, first + count) of a tensor whose first dim is tokens, as
/// [1, count, ...] (one bshd sequence).
Tensor sequenceRows(const Tensor &packed, int64_t first, int64_t count) {
  int64_t width = int64_t(packed.data.size()) / packed.shape[0];
  std::vector<int64_t> shape = {1, count};
  shape.insert(shape.end(), packed.shape.begin() + 1, packed.shape.end());
  Tensor rows = Tensor::zeros(shape);
  std::copy_n(packed.data.begin() + first * width, count * width,
              rows.data.begin());
  return rows;
}

class PackedAttentionTest
    : public InterpreterTest,
      public ::testing::WithParamInterface<mlir::te::AttnMaskType> {};

} // namespace

TEST_P(PackedAttentionTest, EverySequenceAttendsToItselfAlone) {
  // Lengths 3, 0 (an empty sequence), 5 and 1 in 12 tokens: a 3-token tail.
  PackedCase c{GetParam(), {3, 0, 5, 1}, 12, 6};
  mlir::func::FuncOp fwd = parse(c.packedModule(), "fwd");
  mlir::func::FuncOp bwd =
      modules.back()->lookupSymbol<mlir::func::FuncOp>("bwd");
  std::vector<Tensor> args = randomArgs(fwd);
  std::vector<int64_t> starts = c.starts();
  for (size_t i = 0; i < starts.size(); ++i)
    args[3].data[i] = double(starts[i]);
  std::vector<Tensor> outs = run(fwd, args);
  ASSERT_EQ(outs.size(), 2u);
  Tensor grad = randomLike(outs[0].shape);
  std::vector<Tensor> grads =
      run(bwd, {grad, args[0], args[1], args[2], outs[0], outs[1], args[3]});
  ASSERT_EQ(grads.size(), 3u);

  for (int64_t b = 0; b < c.batch(); ++b) {
    int64_t first = starts[b], length = c.lengths[b];
    if (length == 0)
      continue;
    mlir::func::FuncOp seqFwd = parse(c.sequenceModule(length), "fwd");
    mlir::func::FuncOp seqBwd =
        modules.back()->lookupSymbol<mlir::func::FuncOp>("bwd");
    std::vector<Tensor> seqArgs = {sequenceRows(args[0], first, length),
                                   sequenceRows(args[1], first, length),
                                   sequenceRows(args[2], first, length)};
    std::vector<Tensor> seqOuts = run(seqFwd, seqArgs);
    ASSERT_EQ(seqOuts.size(), 2u);
    EXPECT_TRUE(allClose(sequenceRows(outs[0], first, length), seqOuts[0]))
        << "output of sequence " << b;
    for (int64_t h = 0; h < c.heads; ++h)
      for (int64_t i = 0; i < length; ++i)
        EXPECT_NEAR(outs[1].data[(b * c.heads + h) * c.maxSeqlen + i],
                    seqOuts[1].data[h * length + i], 1e-12)
            << "log-sum-exp of sequence " << b << ", head " << h << ", row "
            << i;
    std::vector<Tensor> seqGrads =
        run(seqBwd, {sequenceRows(grad, first, length), seqArgs[0], seqArgs[1],
                     seqArgs[2], seqOuts[0], seqOuts[1]});
    ASSERT_EQ(seqGrads.size(), 3u);
    for (int i = 0; i < 3; ++i)
      EXPECT_TRUE(allClose(sequenceRows(grads[i], first, length), seqGrads[i]))
          << "gradient of "
          << "qkv"[i] << " in sequence " << b;
  }
  // The tail after the last sequence: no output, no gradient.
  int64_t tail = starts.back();
  for (const Tensor *tensor : {&outs[0], &grads[0], &grads[1], &grads[2]}) {
    int64_t width = int64_t(tensor->data.size()) / c.tokens;
    for (size_t i = tail * width; i < tensor->data.size(); ++i)
      ASSERT_EQ(tensor->data[i], 0.0) << "tail element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    MaskTypes, PackedAttentionTest,
    ::testing::Values(mlir::te::AttnMaskType::padding,
                      mlir::te::AttnMaskType::padding_causal),
    [](const auto &info) {
      return mlir::te::stringifyAttnMaskType(info.param).str();
    });

TEST_F(InterpreterTest, RejectsOffsetsThatAreNotPackedSequences) {
  PackedCase c{mlir::te::AttnMaskType::padding, {2, 2}, 6, 3};
  mlir::func::FuncOp fwd = parse(c.packedModule(), "fwd");
  std::vector<Tensor> args = randomArgs(fwd);
  auto rejects = [&](std::vector<double> offsets) {
    args[3].data = offsets;
    return runFailing(fwd, args).find(
               "'cu_seqlens_q' must start at 0, never decrease, hold no "
               "sequence longer than 3 and end at most at the 6 tokens") !=
           std::string::npos;
  };
  EXPECT_TRUE(rejects({1, 2, 4})); // not from 0
  EXPECT_TRUE(rejects({0, 3, 2})); // decreasing
  EXPECT_TRUE(rejects({0, 4, 5})); // longer than max_seqlen
  EXPECT_TRUE(rejects({0, 3, 7})); // past the tokens
  args[3].data = {0, 3, 6};        // fills the buffer: fine
  EXPECT_EQ(run(fwd, args).size(), 2u);
}
