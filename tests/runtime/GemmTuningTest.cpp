//===- GemmTuningTest.cpp - GEMM tuning files: parse, write, match --------===//
#include "runtime/GemmTuning.h"

#include "llvm/Support/raw_ostream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

using namespace tejit::runtime;
using ::testing::HasSubstr;

namespace {

std::string errorOf(llvm::StringRef text) {
  llvm::Expected<GemmTuning> tuning = GemmTuning::parse(text, "t.json");
  if (tuning)
    return "(parsed)";
  return llvm::toString(tuning.takeError());
}

/// A file with one entry whose fields are `gemm` spliced in.
std::string withGemm(llvm::StringRef gemm) {
  return (R"({"format": "tejit-gemm-tuning", "version": 1,
  "device": "NVIDIA H100 80GB HBM3", "cublaslt": "13.1.0", "gemms": [)" +
          gemm + "]}")
      .str();
}

/// An entry of an m x 16 x 16 GEMM with these operand types.
std::string gemmJson(int64_t m, llvm::StringRef a, llvm::StringRef b) {
  return (llvm::Twine(R"({"m": )") + llvm::Twine(m) +
          R"(, "n": 16, "k": 16, "a": ")" + a + R"(", "b": ")" + b +
          R"(", "fast_accum": false, "algo": {"id": 1, "tile": 1,
      "stages": 1, "split_k": 1, "reduction": 0, "swizzle": 0, "custom": 0,
      "cluster": 0, "inner": 0}})")
      .str();
}

constexpr const char *fc1Fprop =
    R"({"m": 8192, "n": 16384, "k": 4096, "a": "f8E4M3FN", "b": "f8E4M3FN",
        "fast_accum": true,
        "algo": {"id": 66, "tile": 201, "stages": 36, "split_k": 1,
                 "reduction": 0, "swizzle": 0, "custom": 2, "cluster": 5,
                 "inner": 0}})";

TEST(GemmTuningTest, ParsesAndFindsAnEntry) {
  llvm::Expected<GemmTuning> tuning =
      GemmTuning::parse(withGemm(fc1Fprop), "t.json");
  ASSERT_TRUE(bool(tuning)) << llvm::toString(tuning.takeError());
  EXPECT_EQ(tuning->device, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(tuning->cublasLt, "13.1.0");
  const TunedGemm *found = tuning->find(8192, 16384, 4096, ElementType::F8E4M3,
                                        ElementType::F8E4M3, true);
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->algo.tile, 201);
  EXPECT_EQ(found->algo.custom, 2);
  EXPECT_EQ(found->algo.cluster, 5);
  EXPECT_EQ(found->algo.describe(), "algo 66 tile 201 stages 36 split_k 1 "
                                    "reduction 0 swizzle 0 custom 2 cluster "
                                    "5 inner 0");
  // Every field of the key must match: shape, types, accumulation.
  EXPECT_EQ(tuning->find(8192, 16384, 4096, ElementType::F8E4M3,
                         ElementType::F8E4M3, false),
            nullptr);
  EXPECT_EQ(tuning->find(8192, 16384, 4096, ElementType::F8E5M2,
                         ElementType::F8E4M3, true),
            nullptr);
  EXPECT_EQ(tuning->find(8192, 4096, 16384, ElementType::F8E4M3,
                         ElementType::F8E4M3, true),
            nullptr);
}

TEST(GemmTuningTest, AppliesOnlyWhereItWasMeasured) {
  llvm::Expected<GemmTuning> tuning =
      GemmTuning::parse(withGemm(fc1Fprop), "t.json");
  ASSERT_TRUE(bool(tuning));
  EXPECT_EQ(tuning->mismatch("NVIDIA H100 80GB HBM3", "13.1.0"), "");
  EXPECT_THAT(tuning->mismatch("NVIDIA H200", "13.1.0"),
              HasSubstr("measured on NVIDIA H100 80GB HBM3, this is NVIDIA "
                        "H200"));
  EXPECT_THAT(tuning->mismatch("NVIDIA H100 80GB HBM3", "13.2.0"),
              HasSubstr("cuBLASLt 13.1.0, this is 13.2.0"));
}

// What write() produces, parse() reads back to the same entries, for random
// field values.
TEST(GemmTuningTest, WriteThenParseRoundTrips) {
  std::mt19937_64 random(std::random_device{}());
  std::uniform_int_distribution<int64_t> size(1, 1 << 16), field(0, 300);
  GemmTuning tuning;
  tuning.device = "NVIDIA H100 80GB HBM3";
  tuning.cublasLt = "13.1.0";
  for (int i = 0; i < 5; ++i) {
    TunedGemm gemm;
    gemm.m = size(random);
    gemm.n = size(random);
    gemm.k = size(random);
    gemm.a = i % 2 ? ElementType::F8E5M2 : ElementType::F8E4M3;
    gemm.fastAccum = i % 3 == 0;
    gemm.algo = {field(random), field(random), field(random),
                 field(random), field(random), field(random),
                 field(random), field(random), field(random)};
    gemm.heuristicMs = 0.5 + i;
    gemm.tunedMs = 0.25 + i;
    tuning.gemms.push_back(gemm);
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  tuning.write(os);
  llvm::Expected<GemmTuning> read = GemmTuning::parse(text, "written");
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError()) << "\n" << text;
  ASSERT_EQ(read->gemms.size(), tuning.gemms.size());
  for (size_t i = 0; i < tuning.gemms.size(); ++i) {
    const TunedGemm &want = tuning.gemms[i], &got = read->gemms[i];
    EXPECT_EQ(got.m, want.m);
    EXPECT_EQ(got.n, want.n);
    EXPECT_EQ(got.k, want.k);
    EXPECT_EQ(got.a, want.a);
    EXPECT_EQ(got.b, want.b);
    EXPECT_EQ(got.fastAccum, want.fastAccum);
    EXPECT_TRUE(got.algo == want.algo)
        << got.algo.describe() << " vs " << want.algo.describe();
    EXPECT_DOUBLE_EQ(got.heuristicMs, want.heuristicMs);
    EXPECT_DOUBLE_EQ(got.tunedMs, want.tunedMs);
  }
}

// Float8BlockScaling's GEMMs run other kernels: an entry says its operands'
// scalings, and only GEMMs scaled so find it.
TEST(GemmTuningTest, BlockScaledEntriesApplyOnlyToBlockScaledGemms) {
  std::string tensor = gemmJson(64, "f8E4M3FN", "f8E4M3FN");
  std::string blocks = tensor;
  blocks.replace(blocks.find("\"fast_accum\""), 0,
                 R"("a_scaling": "block_1d", "b_scaling": "block_2d", )");
  blocks.replace(blocks.find("\"id\": 1"), 7, "\"id\": 2");
  llvm::Expected<GemmTuning> tuning =
      GemmTuning::parse(withGemm(tensor + ", " + blocks), "t.json");
  ASSERT_TRUE(bool(tuning)) << llvm::toString(tuning.takeError());
  const TunedGemm *one =
      tuning->find(64, 16, 16, ElementType::F8E4M3, ElementType::F8E4M3, false);
  ASSERT_NE(one, nullptr);
  EXPECT_EQ(one->algo.id, 1);
  EXPECT_EQ(one->aScaling, GemmScaling::Tensor);
  const TunedGemm *block =
      tuning->find(64, 16, 16, ElementType::F8E4M3, ElementType::F8E4M3, false,
                   GemmScaling::Block1D, GemmScaling::Block2D);
  ASSERT_NE(block, nullptr);
  EXPECT_EQ(block->algo.id, 2);
  EXPECT_EQ(tuning->find(64, 16, 16, ElementType::F8E4M3, ElementType::F8E4M3,
                         false, GemmScaling::Block1D, GemmScaling::Block1D),
            nullptr);

  // Written back with the scalings of block-scaled entries only.
  std::string text;
  llvm::raw_string_ostream os(text);
  tuning->write(os);
  EXPECT_EQ(llvm::StringRef(text).count("\"a_scaling\": \"block_1d\""), 1u)
      << text;
  EXPECT_EQ(llvm::StringRef(text).count("a_scaling"), 1u) << text;
  llvm::Expected<GemmTuning> read = GemmTuning::parse(text, "written");
  ASSERT_TRUE(bool(read)) << llvm::toString(read.takeError());
  ASSERT_EQ(read->gemms.size(), 2u);
  EXPECT_EQ(read->gemms[1].aScaling, GemmScaling::Block1D);
  EXPECT_EQ(read->gemms[1].bScaling, GemmScaling::Block2D);

  std::string bad = tensor;
  bad.replace(bad.find("\"fast_accum\""), 0, R"("b_scaling": "block", )");
  EXPECT_THAT(errorOf(withGemm(bad)),
              HasSubstr("expected \"tensor\", \"block_1d\" or "
                        "\"block_2d\""));
}

TEST(GemmTuningTest, BadFilesSayWhatIsWrong) {
  EXPECT_THAT(errorOf("{"), HasSubstr("GEMM tuning file t.json"));
  EXPECT_THAT(errorOf(R"({"format": "other", "version": 1, "device": "d",
                          "cublaslt": "13.1.0", "gemms": []})"),
              HasSubstr("\"format\" is \"other\""));
  EXPECT_THAT(errorOf(R"({"format": "tejit-gemm-tuning", "version": 2,
                          "device": "d", "cublaslt": "13.1.0", "gemms": []})"),
              HasSubstr("version 1 is read"));
  EXPECT_THAT(errorOf(R"({"format": "tejit-gemm-tuning", "version": 1,
                          "cublaslt": "13.1.0", "gemms": []})"),
              HasSubstr("device"));
  EXPECT_THAT(errorOf(withGemm(gemmJson(16, "bf16", "f8E4M3FN"))),
              HasSubstr("expected \"f8E4M3FN\" or \"f8E5M2\""));
  EXPECT_THAT(errorOf(withGemm(gemmJson(16, "f8E5M2", "f8E5M2"))),
              HasSubstr("E5M2 x E5M2"));
  EXPECT_THAT(errorOf(withGemm(gemmJson(0, "f8E4M3FN", "f8E4M3FN"))),
              HasSubstr("must be positive"));
  // A missing algorithm field is named with its place in the file.
  EXPECT_THAT(errorOf(withGemm(R"({"m": 16, "n": 16, "k": 16,
      "a": "f8E4M3FN", "b": "f8E4M3FN", "fast_accum": false,
      "algo": {"id": 1, "tile": 1}})")),
              HasSubstr("stages"));
}

TEST(GemmTuningTest, AnUnreadableFileIsNamed) {
  llvm::Expected<GemmTuning> tuning =
      GemmTuning::load("/nonexistent/tuning.json");
  ASSERT_FALSE(bool(tuning));
  EXPECT_THAT(llvm::toString(tuning.takeError()),
              HasSubstr("cannot read the GEMM tuning file "
                        "/nonexistent/tuning.json"));
}

} // namespace
