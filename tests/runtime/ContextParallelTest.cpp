//===- ContextParallelTest.cpp - context parallelism without a GPU --------===//
//
// docs/context-parallel.md: how a context-parallel attention step splits its
// local queries (runtime/ContextParallel.h), and the copies that put the
// ranks' tokens in sequence order (runtime/CpCollective.h), checked by
// running those copies on the host for simulated ranks against the layout
// the contract gives.
//
//===----------------------------------------------------------------------===//
#include "runtime/ContextParallel.h"
#include "runtime/AttentionLauncher.h"
#include "runtime/CpCollective.h"
#include "tests/runtime/StepFunctions.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstring>
#include <numeric>
#include <random>

using namespace tejit::runtime;
using namespace tejit::runtime::steptest;

namespace {

/// A causal sbhd step of rank `rank` of 2: 256 local queries (b 2, h 8,
/// d 64) against 512 gathered keys of 2 groups; the backward's operands and
/// results after the forward's.
struct CpSteps {
  FunctionPlan function = functionWith({
      tensorOf({2048, 2, 8, 64}, ElementType::BF16), // 0 q
      tensorOf({4096, 2, 2, 64}, ElementType::BF16), // 1 k
      tensorOf({4096, 2, 2, 64}, ElementType::BF16), // 2 v
      tensorOf({2048, 2, 8, 64}, ElementType::BF16), // 3 o
      tensorOf({2, 8, 2048}, ElementType::F32),      // 4 stats
      tensorOf({2048, 2, 8, 64}, ElementType::BF16), // 5 dO
      tensorOf({2048, 2, 8, 64}, ElementType::BF16), // 6 dq
      tensorOf({4096, 2, 2, 64}, ElementType::BF16), // 7 dk
      tensorOf({4096, 2, 2, 64}, ElementType::BF16), // 8 dv
      tensorOf({2, 1, 1, 4096}, ElementType::I1),    // 9 a padding mask
      tensorOf({2}, ElementType::I64),               // 10 an RNG state
  });
  AttentionStep forward, backward;

  explicit CpSteps(int64_t rank, const char *mask = "causal") {
    forward.operands = {0, 1, 2};
    forward.results = {3, 4};
    forward.attributes = {
        {"qkv_format", "#te.qkv_format<sbhd>"},
        {"attn_mask_type", std::string("#te.attn_mask_type<") + mask + ">"},
        {"softmax_scale", "1.250000e-01 : f64"},
        {"cp_ranks", "2 : i64"},
        {"cp_rank", std::to_string(rank) + " : i64"}};
    backward = forward;
    backward.backward = true;
    backward.operands = {5, 0, 1, 2, 3, 4};
    backward.results = {6, 7, 8};
  }
};

TEST(ContextParallelTest, CausalStepsRunAsTwoChunks) {
  // Rank 0 holds chunks 0 and 3 of 4 (1024 tokens each): the early chunk
  // sees its own 1024 keys (the plain causal mask), the late one 4096.
  for (auto [rank, earlyKeys, lateKeys] :
       {std::tuple{0, 1024, 4096}, std::tuple{1, 2048, 3072}}) {
    SCOPED_TRACE(rank);
    CpSteps steps(rank);
    for (const AttentionStep *step : {&steps.forward, &steps.backward}) {
      auto launcher = AttentionLauncher::parse(*step, steps.function);
      ASSERT_TRUE(bool(launcher)) << llvm::toString(launcher.takeError());
      const CpAttentionSplit *split = launcher->contextParallel();
      ASSERT_NE(split, nullptr);
      EXPECT_EQ(split->ranks, 2);
      EXPECT_EQ(split->rank, rank);
      EXPECT_EQ(split->chunk, 1024);
      ASSERT_EQ(split->chunks.size(), 2u);
      for (auto [chunk, firstRow, keys] :
           {std::tuple{&split->chunks[0], 0, earlyKeys},
            std::tuple{&split->chunks[1], 1024, lateKeys}}) {
        EXPECT_EQ(chunk->firstRow, firstRow);
        EXPECT_EQ(chunk->keys, keys);
        const AttentionProblem &forward = chunk->forward;
        EXPECT_EQ(forward.seqQ, 1024);
        EXPECT_EQ(forward.seqKv, keys);
        EXPECT_EQ(forward.mask, keys == 1024
                                    ? AttentionMask::Causal
                                    : AttentionMask::CausalBottomRight);
        EXPECT_EQ(forward.rowsQ(), 2048);
        EXPECT_EQ(forward.rowsKv(), 4096);
        // The backward: the diagonal block (causal) and the keys before it.
        EXPECT_EQ(chunk->diagonalStart, keys - 1024);
        EXPECT_EQ(chunk->diagonal.seqKv, 1024);
        EXPECT_EQ(chunk->diagonal.mask, AttentionMask::Causal);
        EXPECT_EQ(bool(chunk->visible), keys > 1024);
        if (chunk->visible) {
          EXPECT_EQ(chunk->visible->seqKv, keys - 1024);
          EXPECT_EQ(chunk->visible->mask, AttentionMask::None);
          EXPECT_EQ(chunk->visible->rowsKv(), 4096);
        }
        EXPECT_FALSE(bool(forward.validate()));
      }
      // The launcher's own problem is the early chunk's first one.
      const AttentionProblem &own = launcher->problem();
      EXPECT_EQ(own.seqKv, step->backward ? 1024 : earlyKeys);
      EXPECT_EQ(launcher->needsCpAccumulate(), step->backward);
      // The buffers' rows are part of the graph's key.
      EXPECT_THAT(own.key(), ::testing::HasSubstr(" rows=2048,4096"));
    }
  }
  // With dropout each chunk's backward is its forward's one problem: the
  // masks must stay where the forward drew them. So it is for short
  // chunks, where the extra calls cost more than they save.
  CpSteps dropout(1);
  dropout.backward.attributes["dropout"] = "1.000000e-01 : f64";
  dropout.backward.operands.push_back(10);
  auto launcher = AttentionLauncher::parse(dropout.backward, dropout.function);
  ASSERT_TRUE(bool(launcher)) << llvm::toString(launcher.takeError());
  for (const CpChunk &chunk : launcher->contextParallel()->chunks) {
    EXPECT_FALSE(chunk.visible);
    EXPECT_EQ(chunk.diagonalStart, 0);
    EXPECT_EQ(chunk.diagonal.seqKv, chunk.keys);
  }
  AttentionProblem shortChunks;
  shortChunks.batch = 1;
  shortChunks.heads = shortChunks.kvHeads = 8;
  shortChunks.headDim = 64;
  shortChunks.seqQ = 2 * (kSplitBackwardMinChunk / 2);
  shortChunks.seqKv = 2 * shortChunks.seqQ;
  shortChunks.mask = AttentionMask::Causal;
  shortChunks.backward = true;
  auto split = splitCpAttention(shortChunks, 2, 1);
  ASSERT_TRUE(bool(split)) << llvm::toString(split.takeError());
  for (const CpChunk &chunk : split->chunks)
    EXPECT_FALSE(chunk.visible);
}

TEST(ContextParallelTest, UnmaskedStepsRunAsOne) {
  CpSteps steps(1, "no_mask");
  auto launcher = AttentionLauncher::parse(steps.backward, steps.function);
  ASSERT_TRUE(bool(launcher)) << llvm::toString(launcher.takeError());
  ASSERT_NE(launcher->contextParallel(), nullptr);
  EXPECT_TRUE(launcher->contextParallel()->chunks.empty());
  EXPECT_FALSE(launcher->needsCpAccumulate());
  const AttentionProblem &p = launcher->problem();
  EXPECT_EQ(p.seqQ, 2048);
  EXPECT_EQ(p.seqKv, 4096);
  EXPECT_EQ(p.mask, AttentionMask::None);
  EXPECT_EQ(p.bufferRowsQ, 0);
}

TEST(ContextParallelTest, RefusesWhatItDoesNotSplit) {
  auto refusal = [](CpSteps steps) {
    auto launcher = AttentionLauncher::parse(steps.forward, steps.function);
    return launcher ? std::string() : llvm::toString(launcher.takeError());
  };
  CpSteps padded(0, "padding");
  padded.forward.operands.push_back(9);
  EXPECT_THAT(refusal(padded), ::testing::HasSubstr("takes no padding mask"));
  CpSteps outOfRange(2);
  EXPECT_THAT(refusal(outOfRange),
              ::testing::HasSubstr("cp_rank must lie in [0, cp_ranks)"));
  CpSteps threeRanks(0);
  threeRanks.forward.attributes["cp_ranks"] = "3 : i64";
  EXPECT_THAT(refusal(threeRanks),
              ::testing::HasSubstr("s_kv (4096) must be cp_ranks times s_q "
                                   "(2048)"));
  CpSteps strided(0);
  strided.backward.tokenStrides = {{"grad_k", 1024}};
  auto launcher = AttentionLauncher::parse(strided.backward, strided.function);
  ASSERT_FALSE(bool(launcher));
  EXPECT_THAT(llvm::toString(launcher.takeError()),
              ::testing::HasSubstr("dk and dv must be packed"));
}

TEST(ContextParallelTest, RowOffsets) {
  AttentionProblem p;
  p.batch = 2;
  p.heads = 8;
  p.kvHeads = 2;
  p.headDim = 64;
  p.element = ElementType::BF16;
  p.layout = AttentionLayout::Sbhd;
  // sbhd: a position holds every batch entry's tokens.
  EXPECT_EQ(cpRowOffsetBytes(p, 128, 0, false), 128u * 2 * 8 * 64 * 2);
  EXPECT_EQ(cpRowOffsetBytes(p, 128, 0, true), 128u * 2 * 2 * 64 * 2);
  EXPECT_EQ(cpRowOffsetBytes(p, 128, 768, false), 128u * 2 * 768 * 2);
  p.layout = AttentionLayout::Bshd;
  EXPECT_EQ(cpRowOffsetBytes(p, 128, 0, false), 128u * 8 * 64 * 2);
  EXPECT_EQ(cpRowOffsetBytes(p, 128, 768, false), 128u * 768 * 2);
}

/// The whole tensor's row of rank `rank`'s local row `local` (the
/// contract's layout, written independently of cpReorderCopies).
int64_t globalRow(int64_t rank, int64_t local, int64_t localRows, int64_t ranks,
                  bool loadBalanced) {
  if (!loadBalanced)
    return rank * localRows + local;
  int64_t chunk = localRows / 2;
  return local < chunk ? rank * chunk + local
                       : (2 * ranks - 1 - rank) * chunk + (local - chunk);
}

/// Runs `copies` on the host: from the rank-order buffer to the whole one
/// (`toWhole`) or back.
void runCopies(llvm::ArrayRef<CpRowCopy> copies, std::vector<float> &rankSide,
               std::vector<float> &wholeSide, bool toWhole) {
  auto *ranked = reinterpret_cast<char *>(rankSide.data());
  auto *whole = reinterpret_cast<char *>(wholeSide.data());
  for (const CpRowCopy &copy : copies)
    for (size_t line = 0; line < copy.height; ++line) {
      char *rankLine = ranked + copy.rankOffset + line * copy.rankPitch;
      char *wholeLine = whole + copy.wholeOffset + line * copy.wholePitch;
      std::memcpy(toWhole ? wholeLine : rankLine,
                  toWhole ? rankLine : wholeLine, copy.width);
    }
}

TEST(ContextParallelTest, GatherCopiesPutTheSequenceInOrder) {
  std::mt19937 random(std::random_device{}());
  for (int64_t ranks : {2, 4})
    for (int64_t seqDim : {0, 1})
      for (bool loadBalanced : {false, true}) {
        SCOPED_TRACE(llvm::formatv("ranks {0}, seq_dim {1}, balanced {2}",
                                   ranks, seqDim, loadBalanced)
                         .str());
        // [s, b, inner] (sbhd) or [b, s, inner] (bshd) of f32.
        int64_t s = 8 * ranks, b = 3, inner = 5, local = s / ranks;
        std::vector<int64_t> whole = seqDim == 0
                                         ? std::vector<int64_t>{s, b, inner}
                                         : std::vector<int64_t>{b, s, inner};
        std::vector<int64_t> part = whole;
        part[seqDim] = local;
        FunctionPlan function =
            functionWith({tensorOf(part, ElementType::F32),
                          tensorOf(whole, ElementType::F32)});
        CpCollectiveStep step;
        step.in = 0;
        step.out = 1;
        step.ranks = ranks;
        step.seqDim = seqDim;
        step.loadBalanced = loadBalanced;
        // Each rank's tokens: fresh random values, where each came from.
        std::uniform_real_distribution<float> value(-1, 1);
        auto at = [&](int64_t row, int64_t batch, int64_t column,
                      int64_t rows) {
          return seqDim == 0 ? (row * b + batch) * inner + column
                             : (batch * rows + row) * inner + column;
        };
        std::vector<float> expected(size_t(s * b * inner));
        std::vector<float> rankOrder;
        for (int64_t rank = 0; rank < ranks; ++rank) {
          std::vector<float> tokens(size_t(local * b * inner));
          for (int64_t row = 0; row < local; ++row)
            for (int64_t batch = 0; batch < b; ++batch)
              for (int64_t column = 0; column < inner; ++column) {
                float x = value(random);
                tokens[at(row, batch, column, local)] = x;
                expected[at(globalRow(rank, row, local, ranks, loadBalanced),
                            batch, column, s)] = x;
              }
          // What the group's all-gather leaves: the ranks' buffers in rank
          // order.
          rankOrder.insert(rankOrder.end(), tokens.begin(), tokens.end());
        }
        std::vector<CpRowCopy> copies = cpReorderCopies(step, function);
        EXPECT_EQ(copies.empty(), seqDim == 0 && !loadBalanced);
        EXPECT_EQ(cpCollectiveScratchBytes(step, function),
                  copies.empty() ? 0u : expected.size() * sizeof(float));
        std::vector<float> gathered(expected.size(), -7.0f);
        if (copies.empty())
          gathered = rankOrder; // gathered in place
        runCopies(copies, rankOrder, gathered, true);
        EXPECT_EQ(gathered, expected);
        // The reduce-scatter runs the same copies backwards: back to rank
        // order, each rank's block its own tokens.
        std::vector<float> back(rankOrder.size(), -7.0f);
        if (copies.empty())
          back = gathered;
        runCopies(copies, back, gathered, false);
        EXPECT_EQ(back, rankOrder);
      }
}

/// The group's all-to-all over simulated ranks: block j of rank r's output
/// is block r of rank j's input.
std::vector<std::vector<float>>
allToAll(const std::vector<std::vector<float>> &sent) {
  size_t ranks = sent.size(), block = sent[0].size() / ranks;
  std::vector<std::vector<float>> received(
      ranks, std::vector<float>(sent[0].size(), -9.0f));
  for (size_t to = 0; to < ranks; ++to)
    for (size_t from = 0; from < ranks; ++from)
      std::copy_n(sent[from].begin() + to * block, block,
                  received[to].begin() + from * block);
  return received;
}

TEST(ContextParallelTest, AllToAllTradesHeadsForTokens) {
  std::mt19937 random(std::random_device{}());
  std::uniform_real_distribution<float> value(-1, 1);
  for (int64_t ranks : {2, 4})
    for (int64_t seqDim : {0, 1})
      for (bool loadBalanced : {false, true}) {
        SCOPED_TRACE(llvm::formatv("ranks {0}, seq_dim {1}, balanced {2}",
                                   ranks, seqDim, loadBalanced)
                         .str());
        // [s, b, h, d] (sbhd) or [b, s, h, d] (bshd) of f32: each rank's
        // tokens of all heads, and the whole sequence of its heads.
        int64_t s = 4 * ranks, b = 2, heads = 2 * ranks, d = 3;
        int64_t local = s / ranks, blockHeads = heads / ranks;
        auto shape = [&](int64_t rows, int64_t h) {
          return seqDim == 0 ? std::vector<int64_t>{rows, b, h, d}
                             : std::vector<int64_t>{b, rows, h, d};
        };
        auto at = [&](int64_t row, int64_t batch, int64_t head, int64_t col,
                      int64_t rows, int64_t h) {
          size_t outer = seqDim == 0 ? row * b + batch : batch * rows + row;
          return (outer * h + head) * d + col;
        };
        FunctionPlan toHeads =
            functionWith({tensorOf(shape(local, heads), ElementType::F32),
                          tensorOf(shape(s, blockHeads), ElementType::F32)});
        FunctionPlan toSequence =
            functionWith({tensorOf(shape(s, blockHeads), ElementType::F32),
                          tensorOf(shape(local, heads), ElementType::F32)});
        CpCollectiveStep step;
        step.in = 0;
        step.out = 1;
        step.ranks = ranks;
        step.seqDim = seqDim;
        step.loadBalanced = loadBalanced;
        step.allToAll = true;
        step.headDim = 2;
        size_t elements = size_t(s * b * blockHeads * d);
        std::vector<std::vector<float>> tokens(ranks), expected(ranks);
        for (int64_t rank = 0; rank < ranks; ++rank)
          expected[rank].assign(elements, 0.0f);
        for (int64_t rank = 0; rank < ranks; ++rank) {
          tokens[rank].resize(elements);
          for (int64_t row = 0; row < local; ++row)
            for (int64_t batch = 0; batch < b; ++batch)
              for (int64_t head = 0; head < heads; ++head)
                for (int64_t col = 0; col < d; ++col) {
                  float x = value(random);
                  tokens[rank][at(row, batch, head, col, local, heads)] = x;
                  // Head block head / blockHeads goes to that rank, at
                  // this token's place in the sequence.
                  int64_t global =
                      globalRow(rank, row, local, ranks, loadBalanced);
                  expected[head / blockHeads][at(
                      global, batch, head % blockHeads, col, s, blockHeads)] =
                      x;
                }
        }
        // To heads: head blocks out, the exchange, the tokens placed.
        step.gather = true;
        std::vector<CpRowCopy> blocks = cpHeadBlockCopies(step, toHeads);
        std::vector<CpRowCopy> places = cpReorderCopies(step, toHeads);
        EXPECT_EQ(places.empty(), seqDim == 0 && !loadBalanced);
        // A send and a receive buffer; one when the tokens are in order
        // (the step's own output receives).
        EXPECT_EQ(cpCollectiveScratchBytes(step, toHeads),
                  (places.empty() ? 1 : 2) * elements * sizeof(float));
        std::vector<std::vector<float>> sent(ranks);
        for (int64_t rank = 0; rank < ranks; ++rank) {
          sent[rank].assign(elements, -7.0f);
          runCopies(blocks, sent[rank], tokens[rank], false);
        }
        std::vector<std::vector<float>> received = allToAll(sent);
        std::vector<std::vector<float>> whole(ranks);
        for (int64_t rank = 0; rank < ranks; ++rank) {
          whole[rank] = places.empty() ? received[rank]
                                       : std::vector<float>(elements, -7.0f);
          runCopies(places, received[rank], whole[rank], true);
          EXPECT_EQ(whole[rank], expected[rank]) << "rank " << rank;
        }
        // To sequence: the same backwards gives each rank its tokens.
        step.gather = false;
        blocks = cpHeadBlockCopies(step, toSequence);
        places = cpReorderCopies(step, toSequence);
        for (int64_t rank = 0; rank < ranks; ++rank) {
          sent[rank] = places.empty() ? whole[rank]
                                      : std::vector<float>(elements, -7.0f);
          runCopies(places, sent[rank], whole[rank], false);
        }
        received = allToAll(sent);
        for (int64_t rank = 0; rank < ranks; ++rank) {
          std::vector<float> back(elements, -7.0f);
          runCopies(blocks, received[rank], back, true);
          EXPECT_EQ(back, tokens[rank]) << "rank " << rank;
        }
      }
}

} // namespace
