//===- InterpreterMoeTest.cpp - MoE token permutation vs references -------===//
//
// The MoE permutation ops (docs/moe-permutation.md) in the interpreter, on
// fresh random routings, against references written here in float64 from
// Megatron-LM's unfused semantics: tokens gathered expert by expert in
// token order (a mask map) or by a stable sort of the expert ids (an index
// map), the first num_out_tokens kept; unpermute a scatter-add of the
// weighted rows; chunk sorts a split and a concatenation. Gradients are
// checked against central differences of the forward ops. Padding rows
// (past the real counts) hold large values, so that a read of one shows.
//
//===----------------------------------------------------------------------===//
#include "InterpreterTestUtils.h"

#include "gmock/gmock.h"

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

using namespace tejit::testing;
using ::testing::HasSubstr;

namespace {

constexpr double kPadding = 1e6;

/// One routing case: capacities, real rows, experts, choices per token and
/// the output rows kept (-1: all routed pairs).
struct MoeCase {
  const char *name;
  int64_t capTokens, tokens, experts, topk, capOut, outRows;
};

const MoeCase kCases[] = {
    {"Padding", 24, 19, 6, 2, 48, -1},
    {"Drop", 24, 19, 6, 3, 64, 40},
    {"NoPadding", 16, 16, 4, 1, 16, -1},
    {"ManyExperts", 40, 33, 40, 4, 160, 100},
};

/// A routed (token, expert) pair and the column of the map that routes it.
struct Pair {
  int64_t token, expert, column;
};

class InterpreterMoeTest : public InterpreterTest,
                           public ::testing::WithParamInterface<MoeCase> {
protected:
  int64_t hidden = 5;

  /// `topk` distinct experts for each real token, in random order:
  /// ids [capTokens, topk] (padding rows hold garbage ids).
  std::vector<std::vector<int64_t>> randomChoices(const MoeCase &c) {
    std::vector<std::vector<int64_t>> ids(c.tokens);
    std::vector<int64_t> experts(c.experts);
    std::iota(experts.begin(), experts.end(), 0);
    for (auto &row : ids) {
      std::shuffle(experts.begin(), experts.end(), rng);
      row.assign(experts.begin(), experts.begin() + c.topk);
    }
    return ids;
  }

  /// The pairs of the permuted tensor's rows, in order (Megatron-LM's
  /// unfused permute: expert by expert, tokens in order), cut to the kept
  /// rows.
  std::vector<Pair> referenceOrder(const MoeCase &c,
                                   const std::vector<std::vector<int64_t>> &ids,
                                   bool indexColumns) {
    std::vector<Pair> pairs;
    for (int64_t e = 0; e < c.experts; ++e)
      for (int64_t t = 0; t < c.tokens; ++t)
        for (int64_t k = 0; k < c.topk; ++k)
          if (ids[t][k] == e)
            pairs.push_back({t, e, indexColumns ? k : e});
    if (c.outRows >= 0)
      pairs.resize(c.outRows);
    return pairs;
  }

  int64_t outRows(const MoeCase &c) {
    return c.outRows >= 0 ? c.outRows : c.tokens * c.topk;
  }

  Tensor counts(int64_t tokens, int64_t out) {
    return Tensor({2}, {double(tokens), double(out)});
  }

  Tensor mask(const MoeCase &c, const std::vector<std::vector<int64_t>> &ids) {
    Tensor m = Tensor::zeros({c.capTokens, c.experts});
    for (int64_t t = 0; t < c.tokens; ++t)
      for (int64_t e : ids[t])
        m.data[t * c.experts + e] = 1;
    // Padding rows route everywhere: a row map reading them would show.
    for (int64_t i = c.tokens * c.experts; i < c.capTokens * c.experts; ++i)
      m.data[i] = 1;
    return m;
  }

  Tensor index(const MoeCase &c, const std::vector<std::vector<int64_t>> &ids) {
    Tensor m = Tensor::zeros({c.capTokens, c.topk});
    for (int64_t t = 0; t < c.capTokens; ++t)
      for (int64_t k = 0; k < c.topk; ++k)
        m.data[t * c.topk + k] = t < c.tokens ? ids[t][k] : 0;
    return m;
  }

  /// Random rows [rows, hidden] whose rows from `real` on hold kPadding.
  Tensor rows(int64_t rows, int64_t real, int64_t cols) {
    Tensor x = randomLike({rows, cols});
    for (int64_t i = real * cols; i < rows * cols; ++i)
      x.data[i] = kPadding;
    return x;
  }

  std::string permuteModule(const MoeCase &c, bool indexMap) {
    int64_t cols = indexMap ? c.topk : c.experts;
    return substitute(
        R"mlir(
func.func @f(%x: $X, %routing: $R, %counts: tensor<2xi32>, %probs: $P)
    -> ($O, $M, $Q) {
  %map = te.moe_row_map %routing, %counts {num_experts = $E : i64 $INDEX}
      : ($R, tensor<2xi32>) -> $M
  %y, %q = te.moe_permute %x, %map, %counts probs(%probs)
      : ($X, $M, tensor<2xi32>, $P) -> ($O, $Q)
  return %y, %map, %q : $O, $M, $Q
}
)mlir",
        {{"X", tensorType({c.capTokens, hidden})},
         {"R", tensorType({c.capTokens, cols}, indexMap ? "i32" : "i1")},
         {"P", tensorType({c.capTokens, cols})},
         {"O", tensorType({c.capOut, hidden})},
         {"M", tensorType({c.capTokens, cols}, "i32")},
         {"Q", tensorType({c.capOut})},
         {"E", std::to_string(c.experts)},
         {"INDEX", indexMap ? ", index_map" : ""}});
  }

  /// Checks a permute's results against the reference order.
  void expectPermuted(const MoeCase &c, const std::vector<Pair> &order,
                      const Tensor &x, const Tensor &probs, int64_t cols,
                      llvm::ArrayRef<Tensor> results) {
    ASSERT_EQ(results.size(), 3u);
    const Tensor &y = results[0], &map = results[1], &q = results[2];
    Tensor expectedMap = Tensor::zeros(map.shape);
    for (int64_t i = 0; i < c.tokens * cols; ++i)
      expectedMap.data[i] = -1;
    Tensor expectedY = Tensor::zeros(y.shape),
           expectedQ = Tensor::zeros(q.shape);
    for (auto [row, pair] : llvm::enumerate(order)) {
      expectedMap.data[pair.token * cols + pair.column] = double(row);
      for (int64_t h = 0; h < hidden; ++h)
        expectedY.data[row * hidden + h] = x.data[pair.token * hidden + h];
      expectedQ.data[row] = probs.data[pair.token * cols + pair.column];
    }
    EXPECT_TRUE(allClose(map, expectedMap, 0, 0)) << "row map";
    EXPECT_TRUE(allClose(y, expectedY, 0, 0)) << "permuted rows";
    EXPECT_TRUE(allClose(q, expectedQ, 0, 0)) << "permuted probs";
  }
};

TEST_P(InterpreterMoeTest, MaskPermuteGroupsTokensByExpert) {
  const MoeCase &c = GetParam();
  auto ids = randomChoices(c);
  mlir::func::FuncOp f = parse(permuteModule(c, /*indexMap=*/false));
  Tensor x = rows(c.capTokens, c.tokens, hidden);
  Tensor probs = rows(c.capTokens, c.tokens, c.experts);
  std::vector<Tensor> results =
      run(f, {x, mask(c, ids), counts(c.tokens, outRows(c)), probs});
  expectPermuted(c, referenceOrder(c, ids, false), x, probs, c.experts,
                 results);
}

TEST_P(InterpreterMoeTest, IndexPermuteIsAStableSortOfExpertIds) {
  const MoeCase &c = GetParam();
  auto ids = randomChoices(c);
  // The reference of an index map: a stable sort of the flattened ids.
  std::vector<int64_t> flat(c.tokens * c.topk);
  std::iota(flat.begin(), flat.end(), 0);
  std::stable_sort(flat.begin(), flat.end(), [&](int64_t a, int64_t b) {
    return ids[a / c.topk][a % c.topk] < ids[b / c.topk][b % c.topk];
  });
  flat.resize(outRows(c));
  std::vector<Pair> order;
  for (int64_t i : flat)
    order.push_back({i / c.topk, ids[i / c.topk][i % c.topk], i % c.topk});
  mlir::func::FuncOp f = parse(permuteModule(c, /*indexMap=*/true));
  Tensor x = rows(c.capTokens, c.tokens, hidden);
  Tensor probs = rows(c.capTokens, c.tokens, c.topk);
  std::vector<Tensor> results =
      run(f, {x, index(c, ids), counts(c.tokens, outRows(c)), probs});
  expectPermuted(c, order, x, probs, c.topk, results);
}

TEST_P(InterpreterMoeTest, UnpermuteIsAScatterAddOfWeightedRows) {
  const MoeCase &c = GetParam();
  auto ids = randomChoices(c);
  std::string module =
      substitute(R"mlir(
func.func @f(%y: $O, %routing: $R, %counts: tensor<2xi32>, %probs: $P) -> $X {
  %map = te.moe_row_map %routing, %counts {num_experts = $E : i64}
      : ($R, tensor<2xi32>) -> $M
  %x = te.moe_unpermute %y, %map, %counts probs(%probs)
      : ($O, $M, tensor<2xi32>, $P) -> $X
  return %x : $X
}
)mlir",
                 {{"X", tensorType({c.capTokens, hidden})},
                  {"R", tensorType({c.capTokens, c.experts}, "i1")},
                  {"P", tensorType({c.capTokens, c.experts})},
                  {"O", tensorType({c.capOut, hidden})},
                  {"M", tensorType({c.capTokens, c.experts}, "i32")},
                  {"E", std::to_string(c.experts)}});
  mlir::func::FuncOp f = parse(module);
  Tensor y = rows(c.capOut, outRows(c), hidden);
  Tensor probs = rows(c.capTokens, c.tokens, c.experts);
  std::vector<Tensor> results =
      run(f, {y, mask(c, ids), counts(c.tokens, outRows(c)), probs});
  ASSERT_EQ(results.size(), 1u);
  // Megatron-LM's unfused unpermute: rows times their probs, scatter-added.
  Tensor expected = Tensor::zeros({c.capTokens, hidden});
  for (auto [row, pair] : llvm::enumerate(referenceOrder(c, ids, false)))
    for (int64_t h = 0; h < hidden; ++h)
      expected.data[pair.token * hidden + h] +=
          probs.data[pair.token * c.experts + pair.expert] *
          y.data[row * hidden + h];
  EXPECT_TRUE(allClose(results[0], expected));
}

TEST_P(InterpreterMoeTest, BackwardOpsAreTheGradients) {
  const MoeCase &c = GetParam();
  auto ids = randomChoices(c);
  std::string types = R"mlir(
func.func @permute(%x: $X, %routing: $R, %counts: tensor<2xi32>, %probs: $P)
    -> ($O, $Q) {
  %map = te.moe_row_map %routing, %counts {num_experts = $E : i64}
      : ($R, tensor<2xi32>) -> $M
  %y, %q = te.moe_permute %x, %map, %counts probs(%probs)
      : ($X, $M, tensor<2xi32>, $P) -> ($O, $Q)
  return %y, %q : $O, $Q
}
func.func @permute_backward(%dy: $O, %routing: $R, %counts: tensor<2xi32>,
                            %dq: $Q) -> ($X, $P) {
  %map = te.moe_row_map %routing, %counts {num_experts = $E : i64}
      : ($R, tensor<2xi32>) -> $M
  %dx = te.moe_unpermute %dy, %map, %counts : ($O, $M, tensor<2xi32>) -> $X
  %dp = te.moe_gather_probs %dq, %map, %counts : ($Q, $M, tensor<2xi32>) -> $P
  return %dx, %dp : $X, $P
}
func.func @unpermute(%y: $O, %routing: $R, %counts: tensor<2xi32>, %probs: $P)
    -> $X {
  %map = te.moe_row_map %routing, %counts {num_experts = $E : i64}
      : ($R, tensor<2xi32>) -> $M
  %x = te.moe_unpermute %y, %map, %counts probs(%probs)
      : ($O, $M, tensor<2xi32>, $P) -> $X
  return %x : $X
}
func.func @unpermute_backward(%dx: $X, %y: $O, %routing: $R,
                              %counts: tensor<2xi32>, %probs: $P) -> ($O, $P) {
  %map = te.moe_row_map %routing, %counts {num_experts = $E : i64}
      : ($R, tensor<2xi32>) -> $M
  %dy, %dp = te.moe_unpermute_grad %dx, %y, %map, %counts, %probs
      : ($X, $O, $M, tensor<2xi32>, $P) -> ($O, $P)
  return %dy, %dp : $O, $P
}
)mlir";
  std::string module =
      substitute(types, {{"X", tensorType({c.capTokens, hidden})},
                         {"R", tensorType({c.capTokens, c.experts}, "i1")},
                         {"P", tensorType({c.capTokens, c.experts})},
                         {"O", tensorType({c.capOut, hidden})},
                         {"Q", tensorType({c.capOut})},
                         {"M", tensorType({c.capTokens, c.experts}, "i32")},
                         {"E", std::to_string(c.experts)}});
  mlir::func::FuncOp permute = parse(module, "permute");
  mlir::func::FuncOp permuteBackward = parse(module, "permute_backward");
  mlir::func::FuncOp unpermute = parse(module, "unpermute");
  mlir::func::FuncOp unpermuteBackward = parse(module, "unpermute_backward");
  Tensor m = mask(c, ids), n = counts(c.tokens, outRows(c));
  // Gradients only reach real rows: padding rows of the weights are 0.
  Tensor x = rows(c.capTokens, c.capTokens, hidden);
  Tensor probs = rows(c.capTokens, c.capTokens, c.experts);
  Tensor dy = rows(c.capOut, c.capOut, hidden),
         dq = rows(c.capOut, c.capOut, 1);
  dq.shape = {c.capOut};
  std::vector<Tensor> grads = run(permuteBackward, {dy, m, n, dq});
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_TRUE(gradientClose(
      grads[0], numericGradient(permute, {x, m, n, probs}, 0, {dy, dq})));
  EXPECT_TRUE(gradientClose(
      grads[1], numericGradient(permute, {x, m, n, probs}, 3, {dy, dq})));

  Tensor y = rows(c.capOut, c.capOut, hidden);
  Tensor dx = rows(c.capTokens, c.capTokens, hidden);
  grads = run(unpermuteBackward, {dx, y, m, n, probs});
  ASSERT_EQ(grads.size(), 2u);
  EXPECT_TRUE(gradientClose(
      grads[0], numericGradient(unpermute, {y, m, n, probs}, 0, {dx})));
  EXPECT_TRUE(gradientClose(
      grads[1], numericGradient(unpermute, {y, m, n, probs}, 3, {dx})));
}

INSTANTIATE_TEST_SUITE_P(Routings, InterpreterMoeTest,
                         ::testing::ValuesIn(kCases),
                         [](const auto &info) { return info.param.name; });

/// te.moe_chunk_row_map + te.moe_permute (moe_sort_chunks_by_index) and its
/// backward (te.moe_unpermute on the same map).
class InterpreterMoeChunksTest : public InterpreterTest {
protected:
  std::string module(int64_t rows, int64_t chunks) {
    return substitute(R"mlir(
func.func @sort(%x: $X, %splits: $N, %sorted: $N, %counts: tensor<2xi32>,
                %probs: $P) -> ($X, $M, $Q) {
  %map = te.moe_chunk_row_map %splits, %sorted, %counts
      : ($N, $N, tensor<2xi32>) -> $M
  %y, %q = te.moe_permute %x, %map, %counts probs(%probs)
      : ($X, $M, tensor<2xi32>, $P) -> ($X, $Q)
  return %y, %map, %q : $X, $M, $Q
}
func.func @sort_backward(%dy: $X, %splits: $N, %sorted: $N,
                         %counts: tensor<2xi32>) -> $X {
  %map = te.moe_chunk_row_map %splits, %sorted, %counts
      : ($N, $N, tensor<2xi32>) -> $M
  %dx = te.moe_unpermute %dy, %map, %counts : ($X, $M, tensor<2xi32>) -> $X
  return %dx : $X
}
)mlir",
                      {{"X", tensorType({rows, 3})},
                       {"N", tensorType({chunks}, "i32")},
                       {"M", tensorType({rows, 1}, "i32")},
                       {"P", tensorType({rows, 1})},
                       {"Q", tensorType({rows})}});
  }

  static Tensor vector(const std::vector<int64_t> &values) {
    return Tensor({int64_t(values.size())},
                  std::vector<double>(values.begin(), values.end()));
  }
};

TEST_F(InterpreterMoeChunksTest, SortIsASplitAndAConcatenation) {
  // 4 ranks x 3 local experts, as Megatron-LM's all-to-all dispatcher
  // sorts them (by local expert, then rank), with empty chunks; 5 padding
  // rows.
  std::vector<int64_t> splits = {2, 0, 3, 1, 4, 0, 0, 2, 1, 3, 1, 2};
  std::vector<int64_t> sorted = {0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11};
  int64_t used = 19, rows = 24;
  mlir::func::FuncOp sort = parse(module(rows, 12), "sort");
  mlir::func::FuncOp backward = parse(module(rows, 12), "sort_backward");
  Tensor x = randomLike({rows, 3}), probs = randomLike({rows, 1});
  Tensor n({2}, {double(used), double(used)});
  std::vector<Tensor> results =
      run(sort, {x, vector(splits), vector(sorted), n, probs});
  ASSERT_EQ(results.size(), 3u);
  std::vector<int64_t> starts(splits.size() + 1, 0);
  std::partial_sum(splits.begin(), splits.end(), starts.begin() + 1);
  Tensor expected = Tensor::zeros({rows, 3}), expectedQ = Tensor::zeros({rows});
  int64_t at = 0;
  for (int64_t chunk : sorted)
    for (int64_t r = starts[chunk]; r < starts[chunk + 1]; ++r, ++at) {
      for (int64_t h = 0; h < 3; ++h)
        expected.data[at * 3 + h] = x.data[r * 3 + h];
      expectedQ.data[at] = probs.data[r];
    }
  EXPECT_TRUE(allClose(results[0], expected, 0, 0));
  EXPECT_TRUE(allClose(results[2], expectedQ, 0, 0));
  // The backward moves the gradient back: sorting the result with the
  // inverse order would give it too.
  Tensor dy = randomLike({rows, 3});
  std::vector<Tensor> dx =
      run(backward, {dy, vector(splits), vector(sorted), n});
  ASSERT_EQ(dx.size(), 1u);
  Tensor expectedDx = Tensor::zeros({rows, 3});
  for (int64_t r = 0; r < used; ++r) {
    int64_t to = int64_t(results[1].data[r]);
    for (int64_t h = 0; h < 3; ++h)
      expectedDx.data[r * 3 + h] = dy.data[to * 3 + h];
  }
  EXPECT_TRUE(allClose(dx[0], expectedDx, 0, 0));
}

TEST_F(InterpreterMoeChunksTest, RunTimeValuesAreChecked) {
  mlir::func::FuncOp sort = parse(module(8, 3), "sort");
  Tensor x = randomLike({8, 3}), probs = randomLike({8, 1});
  Tensor n({2}, {8, 8});
  EXPECT_THAT(
      runFailing(sort, {x, vector({2, 3, 4}), vector({0, 1, 2}), n, probs}),
      HasSubstr("'split_sizes' sum to 9, more than the 8 rows"));
  EXPECT_THAT(
      runFailing(sort, {x, vector({2, -1, 4}), vector({0, 1, 2}), n, probs}),
      HasSubstr("'split_sizes'[1] is -1; sizes must be >= 0"));
  EXPECT_THAT(
      runFailing(sort, {x, vector({2, 1, 4}), vector({0, 0, 2}), n, probs}),
      HasSubstr("'sorted_index' must be a permutation of 0..2; element 1 is "
                "0"));
  EXPECT_THAT(runFailing(sort, {x, vector({2, 1, 4}), vector({0, 1, 2}),
                                Tensor({2}, {9, 8}), probs}),
              HasSubstr("'counts'[0] (the real tokens) is 9, outside [0, 8]"));
}

TEST_F(InterpreterMoeChunksTest, PermuteCountsAreChecked) {
  mlir::func::FuncOp f = parse(R"mlir(
func.func @f(%x: tensor<4x2xf32>, %m: tensor<4x2xi1>, %c: tensor<2xi32>)
    -> tensor<6x2xf32> {
  %map = te.moe_row_map %m, %c {num_experts = 2 : i64}
      : (tensor<4x2xi1>, tensor<2xi32>) -> tensor<4x2xi32>
  %y = te.moe_permute %x, %map, %c
      : (tensor<4x2xf32>, tensor<4x2xi32>, tensor<2xi32>) -> tensor<6x2xf32>
  return %y : tensor<6x2xf32>
}
)mlir");
  Tensor x = randomLike({4, 2}), m({4, 2}, std::vector<double>(8, 1));
  EXPECT_THAT(runFailing(f, {x, m, Tensor({2}, {4, 7})}),
              HasSubstr("'counts'[1] (the real permuted rows) is 7, outside "
                        "[0, 6]"));
  EXPECT_THAT(runFailing(f, {x, m, Tensor({2}, {-1, 2})}),
              HasSubstr("'counts'[0] (the real tokens) is -1"));
}

} // namespace
