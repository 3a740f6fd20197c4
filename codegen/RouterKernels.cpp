//===- RouterKernels.cpp - MoE router: a warp per token -------------------===//
//
// docs/router.md. A router row is short (E experts, at most a few
// thousand), so a warp routes a token, several tokens a block:
// - te.router_topk and te.router_aux_scores keep the row's scores and
//   selection values in shared memory (a slice per warp, so only
//   __syncwarp is needed), pick the groups and the top k one pick a pass
//   (router.cuh) and write whole rows, then the chosen entries;
// - the backward ops keep a row in registers, E / 32 values a lane;
// - te.router_aux_loss sums probs x tokens_per_expert over blocks of rows,
//   the blocks' sums added in a fixed order by the last block
//   (deterministic); its backward is a thread per element.
// Everything is computed in f32.
//
//===----------------------------------------------------------------------===//
#include "codegen/EmitterImpl.h"

#include "dialects/TEDialect.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <limits>

using namespace mlir;
using namespace mlir::te;
using namespace tejit::codegen;
using llvm::formatv;

namespace {

constexpr const char *kNegInf = "__int_as_float(0xff800000)";
constexpr const char *kEpsilon = "1e-20f";
/// Static shared memory a forward block may take (of 48 KiB).
constexpr int64_t kSharedBudget = 40 * 1024;

/// What a forward row kernel computes (te.router_topk or
/// te.router_aux_scores).
struct ForwardRow {
  Value logits, bias, probs, map, saved, scores;
  int64_t topk = 1, groups = 0, groupTopk = 0;
  bool sigmoid = false, preSoftmax = false;
  /// te.router_aux_scores: sigmoid scores normalized over all experts.
  bool auxScores = false;
  double scale = 1.0;
};

std::string storeAs(Value value, StringRef what) {
  return "tj_convert<" + elementTypeName(tensorType(value).getElementType()) +
         ">::from(" + what.str() + ")";
}

/// The loop over a lane's experts of the row.
void openLaneLoop(CudaWriter &w) {
  w.open("for (int rt_e = rt_lane; rt_e < kE; rt_e += 32)");
}

/// rt_s = the scores (softmax, sigmoid or the logits), rt_v = the values
/// the top k is chosen by; `saved` written where it is the scores.
void writeScores(CudaWriter &w, const KernelBuilder &b, const ForwardRow &r) {
  std::string x = b.param(r.logits).str() + "[rt_row * kE + rt_e]";
  w.line(std::string("float rt_max = ") + kNegInf + ", rt_sum = 0.f;");
  openLaneLoop(w);
  w.line("float rt_x = tj_to_float(" + x + ");");
  if (r.sigmoid)
    w.line("rt_x = 1.f / (1.f + expf(-rt_x));");
  w.line("rt_s[rt_e] = rt_x; rt_max = fmaxf(rt_max, rt_x); rt_sum += rt_x;");
  w.close();
  if (!r.sigmoid && (r.preSoftmax || r.auxScores)) {
    w.line("rt_max = tj_warp_max(rt_max); rt_sum = 0.f;");
    openLaneLoop(w);
    w.line("rt_s[rt_e] = expf(rt_s[rt_e] - rt_max); rt_sum += rt_s[rt_e];");
    w.close();
    w.line("const float rt_inv = 1.f / tj_warp_sum(rt_sum);");
    w.line("for (int rt_e = rt_lane; rt_e < kE; rt_e += 32) rt_s[rt_e] *= "
           "rt_inv;");
  }
  bool savedIsScores = r.sigmoid || r.preSoftmax || r.auxScores;
  std::string selection = "rt_s[rt_e]";
  if (r.bias)
    selection += " + tj_to_float(" + b.param(r.bias).str() + "[rt_e])";
  if (r.auxScores && r.sigmoid) {
    w.line("const float rt_norm = 1.f / (tj_warp_sum(rt_sum) + " +
           std::string(kEpsilon) + ");");
    selection = "rt_s[rt_e] * rt_norm";
  }
  openLaneLoop(w);
  w.line("rt_v[rt_e] = " + selection + ";");
  if (savedIsScores)
    w.line(b.param(r.saved).str() + "[rt_row * kE + rt_e] = rt_s[rt_e];");
  if (r.scores)
    w.line(b.param(r.scores).str() + "[rt_row * kE + rt_e] = rt_v[rt_e];");
  w.close();
  w.line("__syncwarp();");
}

/// Group-limited routing: a lane per group sums the group's top
/// kPerGroup values; a group is kept when fewer than kGroupTopk groups
/// come before it; the experts of the others get -inf.
void writeGroupMask(CudaWriter &w) {
  w.open("for (int rt_g = rt_lane; rt_g < kGroups; rt_g += 32)");
  w.line("float rt_pv = __int_as_float(0x7f800000), rt_sum = 0.f; int rt_pi "
         "= -1;");
  w.open("for (int rt_j = 0; rt_j < kPerGroup; ++rt_j)");
  w.line("float rt_bv; int rt_bi;");
  w.line("tj_router_next(rt_v, rt_g * kGroupSize, (rt_g + 1) * kGroupSize, 1, "
         "rt_pv, rt_pi, rt_bv, rt_bi);");
  w.line("rt_sum += rt_bv; rt_pv = rt_bv; rt_pi = rt_bi;");
  w.close();
  w.line("rt_gs[rt_g] = rt_sum;");
  w.close();
  w.line("__syncwarp();");
  w.open("for (int rt_g = rt_lane; rt_g < kGroups; rt_g += 32)");
  w.line("int rt_rank = 0;");
  w.line("for (int rt_h = 0; rt_h < kGroups; ++rt_h) rt_rank += "
         "tj_router_before(rt_gs[rt_h], rt_h, rt_gs[rt_g], rt_g);");
  w.line("rt_keep[rt_g] = rt_rank < kGroupTopk;");
  w.close();
  w.line("__syncwarp();");
  w.line(std::string("for (int rt_e = rt_lane; rt_e < kE; rt_e += 32) if "
                     "(!rt_keep[rt_e / kGroupSize]) rt_v[rt_e] = ") +
         kNegInf + ";");
  w.line("__syncwarp();");
}

/// rt_idx[0..kK) = the top kK of rt_v, best first.
void writeTopk(CudaWriter &w) {
  w.line("float rt_pv = __int_as_float(0x7f800000); int rt_pi = -1;");
  w.open("for (int rt_k = 0; rt_k < kK; ++rt_k)");
  w.line("float rt_bv; int rt_bi;");
  w.line("tj_router_next(rt_v, rt_lane, kE, 32, rt_pv, rt_pi, rt_bv, "
         "rt_bi);");
  w.line("tj_router_warp_best(rt_bv, rt_bi);");
  w.line("if (rt_lane == 0) rt_idx[rt_k] = rt_bi;");
  w.line("rt_pv = rt_bv; rt_pi = rt_bi;");
  w.close();
  w.line("__syncwarp();");
}

/// te.router_topk's probabilities of the chosen experts (post-softmax or
/// the sigmoid normalization over them), then the rows.
void writeTopkOutputs(CudaWriter &w, const KernelBuilder &b,
                      const ForwardRow &r) {
  std::string probs = b.param(r.probs).str(), map = b.param(r.map).str();
  std::string saved = b.param(r.saved).str();
  bool postSoftmax = !r.sigmoid && !r.preSoftmax;
  w.line(std::string("float rt_cmax = ") + kNegInf + ", rt_csum = 0.f;");
  w.line("for (int rt_i = rt_lane; rt_i < kK; rt_i += 32) rt_cmax = "
         "fmaxf(rt_cmax, rt_s[rt_idx[rt_i]]);");
  w.line("rt_cmax = tj_warp_max(rt_cmax);");
  w.open("for (int rt_i = rt_lane; rt_i < kK; rt_i += 32)");
  w.line("float rt_p = rt_s[rt_idx[rt_i]];");
  if (postSoftmax)
    w.line("rt_p = expf(rt_p - rt_cmax);");
  w.line("rt_pk[rt_i] = rt_p; rt_csum += rt_p;");
  w.close();
  w.line("rt_csum = tj_warp_sum(rt_csum);");
  std::string divide = "1.f";
  if (postSoftmax)
    divide = "1.f / rt_csum";
  else if (r.sigmoid && r.topk > 1)
    divide = std::string("1.f / (rt_csum + ") + kEpsilon + ")";
  w.line("const float rt_div = " + divide + ";");
  // The rows' unchosen entries, then the chosen ones (after __syncwarp:
  // another lane may write the same element).
  openLaneLoop(w);
  w.line(probs + "[rt_row * kE + rt_e] = " + storeAs(r.probs, "0.f") + ";");
  w.line(map + "[rt_row * kE + rt_e] = tj_bool{0};");
  if (postSoftmax)
    w.line(saved + "[rt_row * kE + rt_e] = 0.f;");
  w.close();
  w.line("__syncwarp();");
  w.open("for (int rt_i = rt_lane; rt_i < kK; rt_i += 32)");
  w.line("const tj_i64 rt_at = rt_row * kE + rt_idx[rt_i];");
  w.line("const float rt_p = rt_pk[rt_i] * rt_div;");
  w.line(probs + "[rt_at] = " +
         storeAs(r.probs, floatLiteral(r.scale) + " * rt_p") + ";");
  w.line(map + "[rt_at] = tj_bool{1};");
  if (postSoftmax)
    w.line(saved + "[rt_at] = rt_p;");
  w.close();
}

/// te.router_aux_scores' map: the chosen entries of a zeroed row.
void writeAuxMap(CudaWriter &w, const KernelBuilder &b, const ForwardRow &r) {
  std::string map = b.param(r.map).str();
  w.line("for (int rt_e = rt_lane; rt_e < kE; rt_e += 32) " + map +
         "[rt_row * kE + rt_e] = tj_bool{0};");
  w.line("__syncwarp();");
  w.line("for (int rt_i = rt_lane; rt_i < kK; rt_i += 32) " + map +
         "[rt_row * kE + rt_idx[rt_i]] = tj_bool{1};");
}

llvm::Error emitForward(KernelBuilder &builder, const ForwardRow &r,
                        std::vector<EmittedKernel> &kernels) {
  int64_t rows = rowsOf(r.logits), experts = colsOf(r.logits);
  // rt_s, rt_v, rt_gs (floats), rt_idx (ints), rt_pk, rt_keep a warp.
  int64_t bytesPerWarp = 4 * (2 * experts + 2 * r.topk + r.groups) + r.groups;
  if (bytesPerWarp > kSharedBudget)
    return noEmitter(builder.group.op,
                     formatv("{0} experts need more shared memory than a "
                             "router block has",
                             experts)
                         .str());
  int64_t warps = std::clamp<int64_t>(kSharedBudget / bytesPerWarp, 1, 8);
  warps = std::min(warps, rows);
  CudaWriter w;
  builder.writeSignature(w, warps * 32);
  w.line(formatv("constexpr int kE = {0}, kK = {1}, kWarps = {2};", experts,
                 r.topk, warps)
             .str());
  w.line(formatv("constexpr tj_i64 kRows = {0};", rows).str());
  w.line("const int rt_lane = threadIdx.x % 32, rt_warp = threadIdx.x / 32;");
  w.line("const tj_i64 rt_row = static_cast<tj_i64>(blockIdx.x) * kWarps + "
         "rt_warp;");
  w.line("// A warp leaves as a whole: the kernel synchronizes warps only.");
  w.line("if (rt_row >= kRows) return;");
  // Each warp's slice of the block's shared arrays.
  auto shared = [&](StringRef type, StringRef name, StringRef size) {
    w.line(formatv("__shared__ {0} {1}_all[kWarps][{2}];", type, name, size)
               .str());
    w.line(formatv("{0} *{1} = {1}_all[rt_warp];", type, name).str());
  };
  shared("float", "rt_s", "kE");
  shared("float", "rt_v", "kE");
  shared("int", "rt_idx", "kK");
  if (!r.auxScores)
    shared("float", "rt_pk", "kK");
  if (r.groupTopk > 0) {
    w.line(formatv("constexpr int kGroups = {0}, kGroupTopk = {1}, "
                   "kGroupSize = {2}, kPerGroup = {3};",
                   r.groups, r.groupTopk, experts / r.groups,
                   r.topk / r.groupTopk)
               .str());
    shared("float", "rt_gs", "kGroups");
    shared("bool", "rt_keep", "kGroups");
  }
  writeScores(w, builder, r);
  if (r.groupTopk > 0)
    writeGroupMask(w);
  writeTopk(w);
  if (r.auxScores)
    writeAuxMap(w, builder, r);
  else
    writeTopkOutputs(w, builder, r);
  kernels.push_back(builder.finish(w, {llvm::divideCeil(rows, warps), 1, 1},
                                   {warps * 32, 1, 1}));
  return llvm::Error::success();
}

/// What a backward row kernel computes.
struct BackwardRow {
  Value map, saved, grad, out;
  bool sigmoid = false, preSoftmax = false, normalize = false;
  double scale = 1.0;
};

/// The gradient of a row in registers: rt_g (masked by the map when
/// there is one), through the normalization, the softmax and the sigmoid.
llvm::Error emitBackward(KernelBuilder &builder, const BackwardRow &r,
                         std::vector<EmittedKernel> &kernels) {
  constexpr int64_t warps = 8;
  int64_t rows = rowsOf(r.out), experts = colsOf(r.out);
  CudaWriter w;
  builder.writeSignature(w, warps * 32);
  w.line(formatv("constexpr int kE = {0}, kPer = {1}, kWarps = {2};", experts,
                 llvm::divideCeil(experts, 32), warps)
             .str());
  w.line(formatv("constexpr tj_i64 kRows = {0};", rows).str());
  w.line("const int rt_lane = threadIdx.x % 32;");
  w.line("const tj_i64 rt_row = static_cast<tj_i64>(blockIdx.x) * kWarps + "
         "threadIdx.x / 32;");
  w.line("if (rt_row >= kRows) return;");
  w.line("float rt_g[kPer], rt_s[kPer], rt_m[kPer];");
  w.line("#pragma unroll");
  w.open("for (int rt_j = 0; rt_j < kPer; ++rt_j)");
  w.line("const int rt_e = rt_lane + 32 * rt_j;");
  w.line("const tj_i64 rt_at = rt_row * kE + rt_e;");
  std::string mask =
      r.map ? "tj_to_float(" + builder.param(r.map).str() + "[rt_at])" : "1.f";
  w.line("rt_m[rt_j] = rt_e < kE ? " + mask + " : 0.f;");
  w.line("rt_s[rt_j] = rt_e < kE ? " + builder.param(r.saved).str() +
         "[rt_at] : 0.f;");
  w.line("rt_g[rt_j] = rt_m[rt_j] != 0.f ? " + floatLiteral(r.scale) +
         " * tj_to_float(" + builder.param(r.grad).str() + "[rt_at]) : 0.f;");
  w.close();
  // Sums over the entries of rt_m (the chosen experts, or all).
  auto masked = [&](StringRef name, StringRef term) {
    w.line("float " + name.str() + " = 0.f;");
    w.line("#pragma unroll");
    w.line("for (int rt_j = 0; rt_j < kPer; ++rt_j) if (rt_m[rt_j] != 0.f) " +
           name.str() + " += " + term.str() + ";");
    w.line(name.str() + " = tj_warp_sum(" + name.str() + ");");
  };
  if (r.normalize) {
    masked("rt_sum", "rt_s[rt_j]");
    masked("rt_dot", "rt_g[rt_j] * rt_s[rt_j]");
    w.line(std::string("const float rt_den = rt_sum + ") + kEpsilon + ";");
    w.line("#pragma unroll");
    w.line("for (int rt_j = 0; rt_j < kPer; ++rt_j) rt_g[rt_j] = rt_m[rt_j] "
           "!= 0.f ? rt_g[rt_j] / rt_den - rt_dot / (rt_den * rt_den) : 0.f;");
  }
  if (!r.sigmoid) {
    if (r.preSoftmax)
      w.line("for (int rt_j = 0; rt_j < kPer; ++rt_j) rt_m[rt_j] = 1.f;");
    masked("rt_dot", "rt_g[rt_j] * rt_s[rt_j]");
    w.line("#pragma unroll");
    w.line("for (int rt_j = 0; rt_j < kPer; ++rt_j) rt_g[rt_j] = rt_m[rt_j] "
           "!= 0.f ? rt_s[rt_j] * (rt_g[rt_j] - rt_dot) : 0.f;");
  } else {
    w.line("#pragma unroll");
    w.line("for (int rt_j = 0; rt_j < kPer; ++rt_j) rt_g[rt_j] *= rt_s[rt_j] "
           "* (1.f - rt_s[rt_j]);");
  }
  w.line("#pragma unroll");
  w.open("for (int rt_j = 0; rt_j < kPer; ++rt_j)");
  w.line("const int rt_e = rt_lane + 32 * rt_j;");
  w.line("if (rt_e < kE) " + builder.param(r.out).str() +
         "[rt_row * kE + rt_e] = " + storeAs(r.out, "rt_g[rt_j]") + ";");
  w.close();
  kernels.push_back(builder.finish(w, {llvm::divideCeil(rows, warps), 1, 1},
                                   {warps * 32, 1, 1}));
  return llvm::Error::success();
}

/// num_experts coeff / (topk total_num_tokens^2), as a float literal.
template <typename Op> std::string auxLossConstant(Op op) {
  auto tokens =
      static_cast<double>(static_cast<int64_t>(op.getTotalNumTokens()));
  return floatLiteral(
      static_cast<double>(static_cast<int64_t>(op.getNumExperts())) *
      op.getCoeff().convertToDouble() /
      static_cast<double>(static_cast<int64_t>(op.getTopk())) / tokens /
      tokens);
}

llvm::Error emitAuxLoss(KernelBuilder &builder, RouterAuxLossOp op,
                        std::vector<EmittedKernel> &kernels) {
  // Rows split over about four blocks per SM of 132 (one block took 82 us
  // for 8192 x 256 bf16 on an H200, PyTorch's sum 28 us): each block sums
  // probs x tokens_per_expert over its rows, stores the sum in scratch, and
  // the last block to finish adds the blocks' sums in block order, so the
  // loss does not depend on which block came last.
  constexpr int64_t threads = 256, kTargetBlocks = 4 * 132;
  Value probs = op.getProbs();
  int64_t rows = rowsOf(probs), cols = colsOf(probs);
  int64_t rowsPerSplit = llvm::divideCeil(rows, std::min(rows, kTargetBlocks));
  int64_t splits = llvm::divideCeil(rows, rowsPerSplit);
  if (rowsPerSplit * cols > std::numeric_limits<int32_t>::max())
    return noEmitter(op, "a block's share of probs exceeds 2^31 elements");
  if (splits > 1)
    builder.requestScratch(splits * 4 + 4, splits * 4, 4);
  CudaWriter w;
  builder.writeSignature(w, threads);
  w.line(formatv("constexpr tj_i64 kR = {0}, kRowsPerSplit = {1};", rows,
                 rowsPerSplit)
             .str());
  w.line(formatv("constexpr int kC = {0}, kSplits = {1};", cols, splits).str());
  w.line("const tj_i64 rt_first = static_cast<tj_i64>(blockIdx.y) * "
         "kRowsPerSplit;");
  w.line("const int rt_count = static_cast<int>(((kR - rt_first < "
         "kRowsPerSplit) ? kR - rt_first : kRowsPerSplit) * kC);");
  w.line("float rt_sum = 0.f, rt_unused = 0.f;");
  w.line("for (int rt_i = threadIdx.x; rt_i < rt_count; rt_i += " +
         std::to_string(threads) + ") rt_sum += tj_to_float(" +
         builder.param(probs).str() + "[rt_first * kC + rt_i]) * " +
         "tj_router_count(" + builder.param(op.getTokensPerExpert()).str() +
         "[rt_i % kC]);");
  w.line("tj_block_sum2(rt_sum, rt_unused);");
  if (splits > 1) {
    w.line("if (threadIdx.x == 0) tj_scratch[blockIdx.y] = rt_sum;");
    w.line("unsigned *rt_counter = reinterpret_cast<unsigned *>(tj_scratch + "
           "kSplits);");
    writeLastBlockOfStrip(w, "rt_counter");
    w.line("rt_sum = 0.f;");
    w.line("for (int rt_s = threadIdx.x; rt_s < kSplits; rt_s += " +
           std::to_string(threads) + ") rt_sum += tj_scratch[rt_s];");
    w.line("tj_block_sum2(rt_sum, rt_unused);");
  }
  w.line("if (threadIdx.x == 0) " + builder.param(op.getLoss()).str() +
         "[0] = " + storeAs(op.getLoss(), auxLossConstant(op) + " * rt_sum") +
         ";");
  kernels.push_back(builder.finish(w, {1, splits, 1}, {threads, 1, 1}));
  return llvm::Error::success();
}

llvm::Error emitAuxLossBwd(KernelBuilder &builder, RouterAuxLossBwdOp op,
                           std::vector<EmittedKernel> &kernels) {
  constexpr int64_t threads = 256;
  Value grad = op.getGradProbs();
  int64_t count = rowsOf(grad) * colsOf(grad);
  CudaWriter w;
  builder.writeSignature(w, threads);
  w.line(formatv("constexpr tj_i64 kN = {0}, kC = {1};", count, colsOf(grad))
             .str());
  w.line("const tj_i64 rt_i = static_cast<tj_i64>(blockIdx.x) * " +
         std::to_string(threads) + " + threadIdx.x;");
  w.line("if (rt_i >= kN) return;");
  w.line("const float rt_g = " + auxLossConstant(op) + " * tj_to_float(" +
         builder.param(op.getGradLoss()).str() + "[0]);");
  w.line(builder.param(grad).str() + "[rt_i] = " +
         storeAs(grad, "rt_g * tj_router_count(" +
                           builder.param(op.getTokensPerExpert()).str() +
                           "[rt_i % kC])") +
         ";");
  kernels.push_back(builder.finish(w, {llvm::divideCeil(count, threads), 1, 1},
                                   {threads, 1, 1}));
  return llvm::Error::success();
}

} // namespace

llvm::Error tejit::codegen::emitRouter(KernelBuilder &builder,
                                       std::vector<EmittedKernel> &kernels) {
  const KernelGroup &group = builder.group;
  if (group.ops.size() != 1)
    return noEmitter(group.op, "a router op is a kernel of its own");
  Operation *op = group.ops.front();
  if (auto topk = dyn_cast<RouterTopkOp>(op)) {
    ForwardRow r;
    r.logits = topk.getLogits(), r.bias = topk.getExpertBias();
    r.probs = topk.getProbs(), r.map = topk.getRoutingMap();
    r.saved = topk.getSaved();
    r.topk = static_cast<int64_t>(topk.getTopk());
    r.groups = static_cast<int64_t>(topk.getNumGroups());
    r.groupTopk = static_cast<int64_t>(topk.getGroupTopk());
    r.sigmoid = topk.getScoreFunction() == "sigmoid";
    r.preSoftmax = topk.getUsePreSoftmax();
    r.scale = topk.getScalingFactor().convertToDouble();
    return emitForward(builder, r, kernels);
  }
  if (auto aux = dyn_cast<RouterAuxScoresOp>(op)) {
    ForwardRow r;
    r.logits = aux.getLogits(), r.map = aux.getRoutingMap();
    r.saved = aux.getSaved(), r.scores = aux.getScores();
    r.topk = static_cast<int64_t>(aux.getTopk());
    r.sigmoid = aux.getScoreFunction() == "sigmoid";
    r.auxScores = true;
    return emitForward(builder, r, kernels);
  }
  if (auto bwd = dyn_cast<RouterTopkBwdOp>(op)) {
    BackwardRow r;
    r.map = bwd.getRoutingMap(), r.saved = bwd.getSaved();
    r.grad = bwd.getGradProbs(), r.out = bwd.getGradLogits();
    r.sigmoid = bwd.getScoreFunction() == "sigmoid";
    r.preSoftmax = bwd.getUsePreSoftmax();
    r.normalize = r.sigmoid && static_cast<int64_t>(bwd.getTopk()) > 1;
    r.scale = bwd.getScalingFactor().convertToDouble();
    return emitBackward(builder, r, kernels);
  }
  if (auto bwd = dyn_cast<RouterAuxScoresBwdOp>(op)) {
    BackwardRow r;
    r.saved = bwd.getSaved(), r.grad = bwd.getGradScores();
    r.out = bwd.getGradLogits();
    r.sigmoid = bwd.getScoreFunction() == "sigmoid";
    r.preSoftmax = true;
    r.normalize = r.sigmoid;
    return emitBackward(builder, r, kernels);
  }
  if (auto loss = dyn_cast<RouterAuxLossOp>(op))
    return emitAuxLoss(builder, loss, kernels);
  if (auto bwd = dyn_cast<RouterAuxLossBwdOp>(op))
    return emitAuxLossBwd(builder, bwd, kernels);
  return noEmitter(op);
}
