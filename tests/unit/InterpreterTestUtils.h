//===- InterpreterTestUtils.h - interpreter test helpers --------*- C++ -*-===//
//
// A fixture that parses te IR from strings, runs it with
// tejit::interp::run on seeded random inputs, compares tensors, and takes
// float64 central finite differences of a function's outputs.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_UNIT_INTERPRETERTESTUTILS_H
#define TEJIT_TESTS_UNIT_INTERPRETERTESTUTILS_H

#include "compiler/interpreter/Interpreter.h"
#include "dialects/TEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace tejit::testing {

using interp::Tensor;

/// Element `index` of `shape`, row-major: the flat offset of a multi-index.
inline int64_t flatIndex(llvm::ArrayRef<int64_t> shape,
                         llvm::ArrayRef<int64_t> index) {
  int64_t flat = 0;
  for (size_t i = 0; i < shape.size(); ++i)
    flat = flat * shape[i] + index[i];
  return flat;
}

/// `actual` has `expected`'s shape and every element is within
/// atol + rtol * |expected| of it (NaNs must match NaNs).
inline ::testing::AssertionResult allClose(const Tensor &actual,
                                           const Tensor &expected,
                                           double rtol = 1e-12,
                                           double atol = 1e-12) {
  if (actual.shape != expected.shape ||
      actual.data.size() != expected.data.size())
    return ::testing::AssertionFailure() << "shapes differ";
  for (size_t i = 0; i < actual.data.size(); ++i) {
    double a = actual.data[i], e = expected.data[i];
    bool same = a == e || (std::isnan(a) && std::isnan(e));
    if (!same && !(std::fabs(a - e) <= atol + rtol * std::fabs(e)))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << a << " vs expected " << e;
  }
  return ::testing::AssertionSuccess();
}

/// The largest |element|.
inline double maxAbs(const Tensor &tensor) {
  double max = 0.0;
  for (double value : tensor.data)
    max = std::max(max, std::fabs(value));
  return max;
}

/// An analytic gradient against a numeric one: max |a - n| / max |n| below
/// `rtol`, with a numeric gradient that is not trivially zero.
inline ::testing::AssertionResult gradientClose(const Tensor &analytic,
                                                const Tensor &numeric,
                                                double rtol = 1e-6) {
  if (analytic.shape != numeric.shape)
    return ::testing::AssertionFailure() << "gradient shapes differ";
  double scale = maxAbs(numeric), error = 0.0;
  if (scale < 1e-3)
    return ::testing::AssertionFailure()
           << "numeric gradient is ~0 (max " << scale << "): a weak test";
  for (size_t i = 0; i < numeric.data.size(); ++i)
    error = std::max(error, std::fabs(analytic.data[i] - numeric.data[i]));
  if (error / scale < rtol)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "relative error " << error / scale << " (max abs error " << error
         << ", scale " << scale << ")";
}

/// "tensor<2x3xf32>" for shape [2, 3] and element "f32".
inline std::string tensorType(llvm::ArrayRef<int64_t> shape,
                              llvm::StringRef element = "f32") {
  std::string text = "tensor<";
  for (int64_t dim : shape)
    text += std::to_string(dim) + "x";
  return text + element.str() + ">";
}

/// `text` with every "$NAME" of `substitutions` replaced by its value.
inline std::string substitute(
    std::string text,
    std::initializer_list<std::pair<std::string, std::string>> substitutions) {
  for (const auto &[name, value] : substitutions)
    for (size_t at = text.find("$" + name); at != std::string::npos;
         at = text.find("$" + name, at + value.size()))
      text.replace(at, name.size() + 1, value);
  return text;
}

/// One configuration of te.attention / te.attention_bwd.
struct AttentionCase {
  std::string name;
  mlir::te::QkvFormat format;
  mlir::te::AttnMaskType maskType;
  int64_t batch, seqQ, seqKV, heads, groups, dim;
  double dropout = 0.0;
  /// The mask's shape for `arbitrary` ([b or 1, h or 1, s_q, s_kv]).
  llvm::SmallVector<int64_t> arbitraryMaskShape = {};
  /// window_size [left, right]; none when both are -1.
  int64_t windowLeft = -1, windowRight = -1;

  bool sbhd() const { return format == mlir::te::QkvFormat::sbhd; }

  /// The 4-D shape of `count` heads over `seq` positions in this layout.
  llvm::SmallVector<int64_t> shape(int64_t seq, int64_t count) const {
    return sbhd() ? llvm::SmallVector<int64_t>{seq, batch, count, dim}
                  : llvm::SmallVector<int64_t>{batch, seq, count, dim};
  }

  /// The mask operand's shape, or empty when the mask type takes none.
  llvm::SmallVector<int64_t> maskShape() const {
    using mlir::te::AttnMaskType;
    if (maskType == AttnMaskType::arbitrary)
      return arbitraryMaskShape;
    if (maskType == AttnMaskType::padding ||
        maskType == AttnMaskType::padding_causal ||
        maskType == AttnMaskType::padding_causal_bottom_right)
      return {batch, 1, 1, seqKV};
    return {};
  }

  /// An explicit softmax scale (printed exactly in the IR).
  double scale() const { return 0.625; }

  /// A module with @fwd(q, k, v, [mask,] rng) -> (o, lse) and
  /// @bwd(grad, q, k, v, o, lse, [mask,] rng) -> (dq, dk, dv), with stream 3.
  std::string module() const {
    std::string q = tensorType(shape(seqQ, heads)),
                kv = tensorType(shape(seqKV, groups)),
                lse = tensorType({batch, heads, seqQ});
    bool hasMask = !maskShape().empty();
    std::string maskArg =
        hasMask ? ", %mask: " + tensorType(maskShape(), "i1") : "";
    std::string maskType = hasMask ? ", " + tensorType(maskShape(), "i1") : "";
    return substitute(R"mlir(
func.func @fwd(%q: $Q, %k: $KV, %v: $KV$MASKARG, %rng: tensor<2xi64>)
    -> ($Q, $LSE) {
  %o, %lse = te.attention %q, %k, %v $MASKUSE rng(%rng) $ATTRS
      : ($Q, $KV, $KV$MASKTYPE, tensor<2xi64>) -> ($Q, $LSE)
  return %o, %lse : $Q, $LSE
}
func.func @bwd(%g: $Q, %q: $Q, %k: $KV, %v: $KV, %o: $Q, %lse: $LSE$MASKARG,
               %rng: tensor<2xi64>) -> ($Q, $KV, $KV) {
  %dq, %dk, %dv = te.attention_bwd %g, %q, %k, %v, %o, %lse $MASKUSE
      rng(%rng) $ATTRS
      : ($Q, $Q, $KV, $KV, $Q, $LSE$MASKTYPE, tensor<2xi64>)
        -> ($Q, $KV, $KV)
  return %dq, %dk, %dv : $Q, $KV, $KV
}
)mlir",
                      {{"Q", q},
                       {"KV", kv},
                       {"LSE", lse},
                       {"MASKARG", maskArg},
                       {"MASKTYPE", maskType},
                       {"MASKUSE", hasMask ? "mask(%mask)" : ""},
                       {"ATTRS", attributes()}});
  }

  /// The attribute dictionary of both ops.
  std::string attributes() const {
    return "{attn_mask_type = #te.attn_mask_type<" +
           mlir::te::stringifyAttnMaskType(maskType).str() +
           ">, qkv_format = #te.qkv_format<" +
           mlir::te::stringifyQkvFormat(format).str() +
           ">, softmax_scale = " + std::to_string(scale()) +
           " : f64, dropout = " + std::to_string(dropout) + " : f64" +
           (windowLeft == -1 && windowRight == -1
                ? std::string()
                : ", window_size = array<i64: " + std::to_string(windowLeft) +
                      ", " + std::to_string(windowRight) + ">") +
           ", stream = 3 : i64}";
  }
};

/// Names the case in gtest's messages.
inline void PrintTo(const AttentionCase &c, std::ostream *os) { *os << c.name; }

/// The attention configurations the tests sweep: every mask type, GQA and
/// MQA, both layouts, s_q != s_kv, attention dropout.
inline std::vector<AttentionCase> attentionCases() {
  using mlir::te::QkvFormat;
  using Mask = mlir::te::AttnMaskType;
  // clang-format off
  //  name, format, mask type, batch, s_q, s_kv, heads, groups, dim[, dropout,
  //  arbitrary mask shape, window left, window right]
  return {
      {"NoMaskSbhd", QkvFormat::sbhd, Mask::no_mask, 2, 3, 4, 2, 2, 4},
      {"CausalGqaBshd", QkvFormat::bshd, Mask::causal, 2, 4, 4, 4, 2, 2},
      {"CausalLongerKv", QkvFormat::sbhd, Mask::causal, 1, 3, 5, 2, 1, 4},
      {"CausalBottomRight", QkvFormat::sbhd, Mask::causal_bottom_right,
       2, 3, 5, 2, 2, 2},
      {"CausalBottomRightShorterKv", QkvFormat::bshd,
       Mask::causal_bottom_right, 1, 5, 3, 2, 1, 2},
      {"PaddingMqa", QkvFormat::bshd, Mask::padding, 3, 3, 4, 3, 1, 2},
      {"PaddingCausal", QkvFormat::sbhd, Mask::padding_causal,
       3, 4, 4, 2, 2, 2},
      {"PaddingCausalBottomRight", QkvFormat::bshd,
       Mask::padding_causal_bottom_right, 3, 2, 4, 2, 1, 2},
      {"ArbitraryFull", QkvFormat::sbhd, Mask::arbitrary, 2, 3, 4, 2, 1, 2,
       0.0, {2, 2, 3, 4}},
      {"ArbitraryPerHead", QkvFormat::bshd, Mask::arbitrary, 2, 3, 3, 2, 2, 2,
       0.0, {1, 2, 3, 3}},
      {"ArbitraryPerBatch", QkvFormat::sbhd, Mask::arbitrary, 2, 3, 3, 2, 2, 2,
       0.0, {2, 1, 3, 3}},
      {"DropoutGqaSbhd", QkvFormat::sbhd, Mask::causal, 2, 4, 4, 4, 2, 2, 0.3},
      {"DropoutPaddingBshd", QkvFormat::bshd, Mask::padding, 2, 3, 4, 2, 1, 2,
       0.5},
      {"WindowCausal", QkvFormat::sbhd, Mask::causal, 2, 6, 6, 2, 1, 2, 0.0,
       {}, 2, -1},
      {"WindowBothBoundsBshd", QkvFormat::bshd, Mask::no_mask, 1, 6, 6, 2, 2,
       2, 0.0, {}, 1, 2},
      {"WindowRightOnlyShorterQ", QkvFormat::sbhd, Mask::no_mask, 2, 3, 6, 2,
       1, 2, 0.0, {}, -1, 1},
      {"WindowPaddingCausalDropout", QkvFormat::bshd, Mask::padding_causal, 2,
       5, 5, 2, 2, 2, 0.3, {}, 1, 0},
      {"WindowPaddingBottomRight", QkvFormat::sbhd, Mask::padding, 2, 4, 6, 2,
       1, 2, 0.0, {}, 2, 0},
  };
  // clang-format on
}

/// Parses and runs te IR; owns the context and the parsed modules.
class InterpreterTest : public ::testing::Test {
protected:
  InterpreterTest() {
    context.loadDialect<mlir::te::TEDialect, mlir::func::FuncDialect>();
  }

  /// Parses `source` and returns its function `name` (null on errors, with a
  /// test failure).
  mlir::func::FuncOp parse(llvm::StringRef source, llvm::StringRef name = "f") {
    modules.push_back(
        mlir::parseSourceString<mlir::ModuleOp>(source, &context));
    if (!modules.back()) {
      ADD_FAILURE() << "cannot parse:\n" << source.str();
      return nullptr;
    }
    auto function = modules.back()->lookupSymbol<mlir::func::FuncOp>(name);
    EXPECT_TRUE(function) << "no function @" << name.str();
    return function;
  }

  /// Random arguments for `function` (normal(0, stddev) floats, random i1).
  std::vector<Tensor> randomArgs(mlir::func::FuncOp function,
                                 double stddev = 1.0) {
    std::vector<Tensor> args;
    for (mlir::Type type : function.getArgumentTypes())
      args.push_back(interp::randomTensor(
          llvm::cast<mlir::RankedTensorType>(type), rng, stddev));
    return args;
  }

  /// Runs `function`, failing the test (and returning no tensors) on errors.
  std::vector<Tensor> run(mlir::func::FuncOp function,
                          llvm::ArrayRef<Tensor> args,
                          const interp::Options &options = {}) {
    mlir::FailureOr<std::vector<Tensor>> results =
        interp::run(function, args, options);
    EXPECT_TRUE(mlir::succeeded(results)) << "interpreter failed";
    return mlir::succeeded(results) ? *results : std::vector<Tensor>();
  }

  /// Runs `function` expecting it to fail; returns the diagnostics' text.
  std::string runFailing(mlir::func::FuncOp function,
                         llvm::ArrayRef<Tensor> args) {
    std::string messages;
    mlir::ScopedDiagnosticHandler handler(&context,
                                          [&](mlir::Diagnostic &diag) {
                                            messages += diag.str() + "\n";
                                            return mlir::success();
                                          });
    EXPECT_TRUE(mlir::failed(interp::run(function, args)))
        << "the interpreter should have failed";
    return messages;
  }

  /// The central-difference gradient, w.r.t. args[argIndex], of
  /// L = sum_k <weights[k], results[k]> (an empty weight skips result k).
  Tensor numericGradient(mlir::func::FuncOp function, std::vector<Tensor> args,
                         unsigned argIndex, llvm::ArrayRef<Tensor> weights,
                         double step = 1e-5) {
    auto loss = [&]() {
      std::vector<Tensor> results = run(function, args);
      double sum = 0.0;
      for (size_t k = 0; k < weights.size() && k < results.size(); ++k)
        for (size_t i = 0; i < weights[k].data.size(); ++i)
          sum += weights[k].data[i] * results[k].data[i];
      return sum;
    };
    Tensor gradient = Tensor::zeros(args[argIndex].shape);
    for (size_t i = 0; i < gradient.data.size(); ++i) {
      double saved = args[argIndex].data[i];
      args[argIndex].data[i] = saved + step;
      double plus = loss();
      args[argIndex].data[i] = saved - step;
      double minus = loss();
      args[argIndex].data[i] = saved;
      gradient.data[i] = (plus - minus) / (2 * step);
    }
    return gradient;
  }

  /// A random tensor of `shape` (normal floats).
  Tensor randomLike(llvm::ArrayRef<int64_t> shape, double stddev = 1.0) {
    Tensor tensor = Tensor::zeros(shape);
    std::normal_distribution<double> normal(0.0, stddev);
    for (double &value : tensor.data)
      value = normal(rng);
    return tensor;
  }

  mlir::MLIRContext context;
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> modules;
  std::mt19937_64 rng{20240611};
};

} // namespace tejit::testing

#endif // TEJIT_TESTS_UNIT_INTERPRETERTESTUTILS_H
