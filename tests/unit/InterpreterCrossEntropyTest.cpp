//===- InterpreterCrossEntropyTest.cpp - parallel_cross_entropy's ops -----===//
//
// The interpreter's te.cross_entropy_* ops (docs/cross-entropy.md) against
// a float64 reference written another way: the loss as the cross entropy
// -sum_j q_j log p_j of the smoothed target distribution q = (1 - ε)
// onehot(y) + ε / V, the gradient by central differences of the forward;
// ignored rows, the mean over rows not ignored, i32 and i64 targets, and
// the vocab split over 2 and 3 ranks (one interpreter per rank in threads,
// gathering the row statistics with te.tp_all_gather) against one rank.
//
//===----------------------------------------------------------------------===//
#include "InterpreterTestUtils.h"
#include "ThreadCollectives.h"

#include "gmock/gmock.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

using namespace tejit::testing;
using ::testing::HasSubstr;

namespace {

/// One cross entropy configuration; a rank's program holds columns
/// [rank * vocab / ranks, (rank + 1) * vocab / ranks).
struct Config {
  int64_t rows = 6, vocab = 12;
  double smoothing = 0.0;
  int64_t ignore = -100;
  bool reduce = false;
  const char *targetType = "i64";
  int64_t ranks = 1;
};

std::string attrs(const Config &c, int64_t rank, bool bwd) {
  int64_t local = c.vocab / c.ranks;
  std::string text = "vocab_size = " + std::to_string(c.vocab) +
                     ", ignore_index = " + std::to_string(c.ignore) +
                     ", label_smoothing = " + std::to_string(c.smoothing);
  if (bwd)
    text += ", vocab_start = " + std::to_string(rank * local);
  else
    text += ", ranks = " + std::to_string(c.ranks);
  return "{" + text + "}";
}

/// @f(logits [rows, vocab / ranks], target) -> (loss [rows] or the mean
/// and count [1], lse) of rank `rank`.
std::string forwardIr(const Config &c, int64_t rank) {
  int64_t local = c.vocab / c.ranks;
  std::string x = tensorType({c.rows, local}),
              y = tensorType({c.rows}, c.targetType);
  std::string row = tensorType({c.rows}), one = tensorType({1});
  std::string stats = tensorType({c.rows, 4});
  std::string all = tensorType({c.ranks * c.rows, 4});
  std::string text = "func.func @f(%x: " + x + ", %y: " + y + ") -> (" +
                     (c.reduce ? one + ", " + one : row) + ", " + row + ") {\n";
  text += "  %s = te.cross_entropy_stats %x, %y {vocab_start = " +
          std::to_string(rank * local) +
          ", ignore_index = " + std::to_string(c.ignore) + "} : (" + x + ", " +
          y + ") -> " + stats + "\n";
  std::string gathered = "%s";
  if (c.ranks > 1) {
    text += "  %all = te.tp_all_gather %s {ranks = " + std::to_string(c.ranks) +
            "} : " + stats + " -> " + all + "\n";
    gathered = "%all";
  }
  text += "  %loss, %lse = te.cross_entropy_loss " + gathered + ", %y " +
          attrs(c, rank, false) + " : (" + all + ", " + y + ") -> (" + row +
          ", " + row + ")\n";
  if (c.reduce) {
    text += "  %mean, %count = te.cross_entropy_mean %loss, %y {ignore_index "
            "= " +
            std::to_string(c.ignore) + "} : (" + row + ", " + y + ") -> (" +
            one + ", " + one + ")\n";
    text += "  return %mean, %count, %lse : " + one + ", " + one + ", " + row +
            "\n}\n";
  } else {
    text += "  return %loss, %lse : " + row + ", " + row + "\n}\n";
  }
  return text;
}

/// @b(logits, target, lse, grad_loss[, count]) -> grad of rank `rank`.
std::string backwardIr(const Config &c, int64_t rank) {
  int64_t local = c.vocab / c.ranks;
  std::string x = tensorType({c.rows, local}),
              y = tensorType({c.rows}, c.targetType);
  std::string row = tensorType({c.rows}), one = tensorType({1});
  std::string g = c.reduce ? one : row;
  std::string text = "func.func @b(%x: " + x + ", %y: " + y + ", %lse: " + row +
                     ", %g: " + g + (c.reduce ? ", %c: " + one : "") + ") -> " +
                     x + " {\n";
  text += "  %dx = te.cross_entropy_bwd %x, %y, %lse, %g" +
          std::string(c.reduce ? " count(%c) " : " ") + attrs(c, rank, true) +
          " : (" + x + ", " + y + ", " + row + ", " + g +
          (c.reduce ? ", " + one : "") + ") -> " + x + "\n";
  return text + "  return %dx : " + x + "\n}\n";
}

/// The float64 reference loss of each row: -sum_j q_j (x_j - lse).
std::vector<double> referenceLoss(const Config &c, const Tensor &x,
                                  const Tensor &y) {
  std::vector<double> loss(c.rows, 0.0);
  for (int64_t i = 0; i < c.rows; ++i) {
    auto target = static_cast<int64_t>(y.data[i]);
    if (target == c.ignore)
      continue;
    const double *row = &x.data[i * c.vocab];
    double sum = 0.0;
    for (int64_t j = 0; j < c.vocab; ++j)
      sum += std::exp(row[j]);
    double lse = std::log(sum);
    for (int64_t j = 0; j < c.vocab; ++j) {
      double q = c.smoothing / c.vocab + (j == target ? 1 - c.smoothing : 0);
      loss[i] -= q * (row[j] - lse);
    }
  }
  return loss;
}

/// Columns [begin, begin + count) of a matrix.
Tensor columns(const Tensor &x, int64_t begin, int64_t count) {
  int64_t rows = x.shape[0], cols = x.shape[1];
  Tensor part = Tensor::zeros({rows, count});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < count; ++j)
      part.data[i * count + j] = x.data[i * cols + begin + j];
  return part;
}

/// The backward's arguments: the logits, targets, the forward's lse (its
/// last result), the loss's gradient and, for the mean, its count.
std::vector<Tensor> backwardArgs(const Config &c, const Tensor &x,
                                 const Tensor &y,
                                 const std::vector<Tensor> &forward,
                                 const Tensor &gradLoss) {
  std::vector<Tensor> args = {x, y, forward.back(), gradLoss};
  if (c.reduce)
    args.push_back(forward[1]);
  return args;
}

class InterpreterCrossEntropyTest : public InterpreterTest {
protected:
  /// A random gradient of the loss: one per row, or the mean's one.
  Tensor randomGradLoss(const Config &c) {
    return c.reduce ? randomLike({1}) : randomLike({c.rows});
  }

  /// Targets in [0, vocab), rows 1 and 4 ignored when `ignoreSome`.
  Tensor targets(const Config &c, bool ignoreSome) {
    std::uniform_int_distribution<int64_t> pick(0, c.vocab - 1);
    Tensor y = Tensor::zeros({c.rows});
    for (int64_t i = 0; i < c.rows; ++i)
      y.data[i] = ignoreSome && (i == 1 || i == 4) ? c.ignore : pick(rng);
    return y;
  }
};

TEST_F(InterpreterCrossEntropyTest, LossIsTheSmoothedCrossEntropy) {
  for (double smoothing : {0.0, 0.1, 1.0})
    for (const char *targetType : {"i32", "i64"})
      for (bool ignoreSome : {false, true}) {
        Config c;
        c.smoothing = smoothing, c.targetType = targetType;
        c.ignore = ignoreSome ? -1 : -100;
        SCOPED_TRACE(forwardIr(c, 0));
        mlir::func::FuncOp f = parse(forwardIr(c, 0));
        Tensor x = randomLike({c.rows, c.vocab}, 3.0),
               y = targets(c, ignoreSome);
        std::vector<Tensor> out = run(f, {x, y});
        ASSERT_EQ(out.size(), 2u);
        EXPECT_TRUE(allClose(out[0], Tensor({c.rows}, referenceLoss(c, x, y)),
                             1e-12, 1e-12));
        for (int64_t i = 0; i < c.rows; ++i) {
          double expected = 0.0;
          if (static_cast<int64_t>(y.data[i]) != c.ignore) {
            for (int64_t j = 0; j < c.vocab; ++j)
              expected += std::exp(x.data[i * c.vocab + j]);
            expected = std::log(expected);
          }
          EXPECT_NEAR(out[1].data[i], expected, 1e-12) << "lse of row " << i;
        }
      }
}

TEST_F(InterpreterCrossEntropyTest, MeanIsOverRowsNotIgnored) {
  Config c;
  c.reduce = true, c.smoothing = 0.2;
  mlir::func::FuncOp f = parse(forwardIr(c, 0));
  Tensor x = randomLike({c.rows, c.vocab}), y = targets(c, true);
  std::vector<Tensor> out = run(f, {x, y});
  ASSERT_EQ(out.size(), 3u);
  std::vector<double> loss = referenceLoss(c, x, y);
  double sum = 0.0;
  for (double value : loss)
    sum += value;
  EXPECT_NEAR(out[0].data[0], sum / 4, 1e-12);
  EXPECT_EQ(out[1].data[0], 4.0);
  // Every row ignored: a mean of 0 over a count of 0 (TE clamps it to 1).
  for (double &target : y.data)
    target = c.ignore;
  out = run(f, {x, y});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].data[0], 0.0);
  EXPECT_EQ(out[1].data[0], 0.0);
}

TEST_F(InterpreterCrossEntropyTest, GradientMatchesFiniteDifferences) {
  for (bool reduce : {false, true})
    for (double smoothing : {0.0, 0.3}) {
      Config c;
      c.reduce = reduce, c.smoothing = smoothing, c.rows = 5, c.vocab = 7;
      SCOPED_TRACE(backwardIr(c, 0));
      mlir::func::FuncOp f = parse(forwardIr(c, 0));
      mlir::func::FuncOp b = parse(backwardIr(c, 0), "b");
      Tensor x = randomLike({c.rows, c.vocab}, 2.0), y = targets(c, true);
      std::vector<Tensor> out = run(f, {x, y});
      ASSERT_FALSE(out.empty());
      Tensor gradLoss = randomGradLoss(c);
      std::vector<Tensor> grad = run(b, backwardArgs(c, x, y, out, gradLoss));
      ASSERT_EQ(grad.size(), 1u);
      Tensor numeric = numericGradient(f, {x, y}, 0, {gradLoss});
      EXPECT_TRUE(gradientClose(grad[0], numeric, 1e-7));
      for (int64_t j = 0; j < c.vocab; ++j)
        EXPECT_EQ(grad[0].data[1 * c.vocab + j], 0.0) << "ignored row 1";
    }
}

TEST_F(InterpreterCrossEntropyTest, VocabSplitOverRanksMatchesOneRank) {
  for (int64_t ranks : {2, 3})
    for (bool reduce : {false, true}) {
      Config one;
      one.vocab = 12, one.smoothing = 0.1, one.reduce = reduce;
      Config split = one;
      split.ranks = ranks;
      SCOPED_TRACE(forwardIr(split, 1));
      mlir::func::FuncOp f = parse(forwardIr(one, 0));
      mlir::func::FuncOp b = parse(backwardIr(one, 0), "b");
      Tensor x = randomLike({one.rows, one.vocab}, 2.0), y = targets(one, true);
      std::vector<Tensor> expected = run(f, {x, y});
      ASSERT_FALSE(expected.empty());
      Tensor gradLoss = randomGradLoss(one);
      std::vector<Tensor> expectedGrad =
          run(b, backwardArgs(one, x, y, expected, gradLoss));
      ASSERT_EQ(expectedGrad.size(), 1u);

      int64_t local = one.vocab / ranks;
      std::vector<mlir::func::FuncOp> forwards, backwards;
      for (int64_t rank = 0; rank < ranks; ++rank) {
        forwards.push_back(parse(forwardIr(split, rank)));
        backwards.push_back(parse(backwardIr(split, rank), "b"));
      }
      std::vector<std::vector<Tensor>> results(ranks), grads(ranks);
      onRanks(ranks, [&](int rank, ThreadCollectives &collectives) {
        Tensor shard = columns(x, rank * local, local);
        results[rank] =
            interpret(forwards[rank], {shard, y}, &collectives, rank);
        if (results[rank].empty())
          return;
        grads[rank] =
            interpret(backwards[rank],
                      backwardArgs(split, shard, y, results[rank], gradLoss),
                      nullptr, rank);
      });
      for (int64_t rank = 0; rank < ranks; ++rank) {
        ASSERT_EQ(results[rank].size(), expected.size());
        for (size_t k = 0; k < expected.size(); ++k)
          EXPECT_TRUE(allClose(results[rank][k], expected[k], 1e-12, 1e-12))
              << "rank " << rank << ", result " << k;
        ASSERT_EQ(grads[rank].size(), 1u);
        EXPECT_TRUE(allClose(grads[rank][0],
                             columns(expectedGrad[0], rank * local, local),
                             1e-12, 1e-15))
            << "rank " << rank << "'s gradient";
      }
    }
}

TEST_F(InterpreterCrossEntropyTest, TargetOutsideTheVocabHasInfiniteLoss) {
  Config c;
  mlir::func::FuncOp f = parse(forwardIr(c, 0));
  Tensor x = randomLike({c.rows, c.vocab}), y = targets(c, false);
  y.data[2] = c.vocab;
  std::vector<Tensor> out = run(f, {x, y});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].data[2], std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isfinite(out[0].data[3]));
}

TEST_F(InterpreterCrossEntropyTest, GatherNeedsTheOtherRanks) {
  Config c;
  c.ranks = 2;
  mlir::func::FuncOp f = parse(forwardIr(c, 0));
  Tensor x = randomLike({c.rows, c.vocab / 2}), y = targets(c, false);
  EXPECT_THAT(runFailing(f, {x, y}), HasSubstr("te.tp_all_gather"));
}

} // namespace
