//===- Gemm.cpp - plan GEMMs through cuBLASLt -----------------------------===//
//
// Row-major plans on column-major cuBLASLt
// ----------------------------------------
// A plan's GEMM is row-major: out[M,N] = op(a) op(b), op(a) [M,K], op(b)
// [K,N]. cuBLASLt is column-major, and the bytes of a row-major [R,C] matrix
// are those of a column-major [C,R] matrix with leading dimension C: its
// transpose. So cuBLASLt computes out's transpose, operands swapped:
//
//   out^T [N,M] = op(b)^T [N,K] * op(a)^T [K,M]
//   cuBLASLt:  D [m=N, n=M] = opA(A) * opB(B),  k = K,  A = b,  B = a
//
//   b as stored          cuBLASLt's A            TRANSA
//   [K,N] (no transpose) col-major [N,K], ld N   N
//   [N,K] (transpose_b)  col-major [K,N], ld K   T
//   a as stored          cuBLASLt's B            TRANSB
//   [M,K] (no transpose) col-major [K,M], ld K   N
//   [K,M] (transpose_a)  col-major [M,K], ld M   T
//   out [M,N]            D (and C): col-major [N,M], ld N
//
// FP8 GEMMs are the plan's TN layout, a [M,K] and b [N,K]: TRANSA = T,
// TRANSB = N, lda = ldb = K, which is the layout Hopper's FP8 kernels demand
// ("A transposed, B not"). Since cuBLASLt's A is the plan's b, its
// A_SCALE_POINTER is b's scale_inv and B_SCALE_POINTER is a's.
//
// A row of cuBLASLt's D is a column of out, so the vectors cuBLASLt adds or
// reduces per row of D (bias, bias gradient: m = N elements) are per column
// of out: out's last dimension, as the plan's bias is. The aux matrix has
// D's layout: column-major [N,M], ld N.
//
// Epilogues
// ---------
//   plan terms               cuBLASLt epilogue  computes (t = alpha * AB)
//   -                        DEFAULT            D = t
//   bias                     BIAS               D = t + bias
//   gelu                     GELU               D = gelu(t)
//   gelu, aux                GELU_AUX           aux = t, D = gelu(aux)
//   bias, gelu               GELU_BIAS          D = gelu(t + bias)
//   bias, gelu, aux          GELU_AUX_BIAS      aux = t + bias, D = gelu(aux)
//   dgelu, aux               DGELU              D = t * gelu'(aux)
//   dgelu, aux, bias_grad    DGELU_BGRAD        DGELU, and bias_grad = the
//                                               row sums of D (sums over M)
//   residual [, bias]        DEFAULT / BIAS     D = t + C (+ bias): C is the
//                                               residual, beta = 1 (only
//                                               for non-FP8 outputs)
// With any of them, d_scale and amax_d when out is FP8 (the plan's quantize):
// D is stored as d_scale * result in FP8 and amax_d is set to max |result|
// (overwritten, not folded into its old value: seen with cuBLASLt 13.1).
// Everything else is rejected: bias_grad without dgelu (the planner never
// emits it; it would be BGRADA/BGRADB), dgelu with a bias, gelu and dgelu
// together, aux without gelu or dgelu, dgelu without aux. The aux of a
// forward GELU is its input, bias included, which is what TE keeps for the
// backward and what DGELU reads.
//
// Types: FP8 GEMMs take E4M3 x E4M3 and E4M3 x E5M2 either way round (never
// E5M2 x E5M2), compute 32F, scale type 32F, alpha 1, beta 0, and give
// bf16/f16/f32 or, with d_scale, FP8. An FP8 D needs a 16-bit C type even
// though beta = 0 never reads C (cuBLASLt ties it to the bias type): the
// bias's type, else a 16-bit aux's, else bf16; C's pointer is then null.
// Bias, bias gradient and aux of FP8 GEMMs are bf16/f16; an FP8 aux would
// need its own scale and amax, which plans do not carry. Other GEMMs take
// two bf16, f16 or f32 operands of one type, compute 32F (f32 operands get
// true f32, not TF32: te.matmul accumulates in f32) and give the operand
// type or f32; C is D.
//
// Block scaling
// -------------
// Under Float8BlockScaling (docs/block-scaling.md) each operand's scale_inv
// is a tensor of per-block scales: the plan's a_scaling and b_scaling say
// "block_1d" (one per 128 elements of a row along K: cuBLASLt's
// CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F) or "block_2d" (one per 128 x 128
// tile: BLK128x128_32F). A_SCALE_MODE describes cuBLASLt's A, the plan's b,
// and B_SCALE_MODE its B, the plan's a, just as the scale pointers swap;
// each pointer is the scale_inv tensor itself (no staging: it is an array,
// and 16-byte aligned as the arena and cuMemAlloc align it). Both operands
// are block-scaled or neither, never both 2-D (cuBLASLt has no such
// kernel), and block-scaled GEMMs run without fast accumulation (TE's split
// accumulator), without an epilogue and with a bf16/f16/f32 out.
//
// The scale tensors are laid out as dialects/BlockScaleLayout.h says, for
// an operand [rows, K] (a [M, K] or b [N, K], K contiguous): 1-D
// [ceil(K/128), pad4(rows)] with rows contiguous, 2-D [ceil(rows/128),
// pad4(ceil(K/128))]. That is Transformer Engine's "GEMM-ready" layout,
// which TE hands to cuBLASLt's VEC128_32F / BLK128x128_32F modes as it is;
// that cuBLASLt reads it so (rows of our operands being the outer M or N
// index of its A and B) is what the GPU tests check against the
// interpreter, not something this machine can verify.
//
// FP8 scalars: cuBLASLt's FP8 kernels also need the scale and amax pointers
// 16-byte aligned (with cuBLASLt 13.1 on an H200, a 4-byte aligned scale
// passes the heuristic and then fails cublasLtMatmul with NOT_SUPPORTED).
// Plans read scales as slots of FP8 meta vectors, 4 bytes apart, so a
// misaligned scalar is staged through one of four 16-byte slots at the start
// of the workspace: a 4-byte device-to-device copy on the stream before the
// GEMM (scales) or after it (amax_d). Aligned scalars are used in place.
//
// Caching
// -------
// Everything but the pointers decides a problem: types, M, N, K,
// transposes, the operands' row strides (GemmPointers: a grouped GEMM's
// contraction reads column ranges, whose leading dimension is the whole
// row), epilogue, fast accumulation, the operands' scale modes, which
// optional pointers are set, and the alignment of every matrix and vector
// pointer (up to 256 bytes), since the heuristic picks kernels for the
// alignment it is told (A-D) or reads off the descriptor's pointers (bias,
// aux). The first run of a problem creates its matmul descriptor and layouts,
// asks the heuristic once and keeps all of it; later runs only set the pointer
// attributes and call cublasLtMatmul. Both steps allocate nothing on the device
// and never synchronize, so run() can be captured into a CUDA graph, even a
// problem's first run. A grouped GEMM's per-group GEMMs change M (or K) with
// the routing at every call (GemmStep::sizesVary): a new size there reuses
// the algorithm of its size class (gemmSizeClass), checked with
// cublasLtMatmulAlgoCheck, so that the heuristic runs once per class, not
// per size (GroupedLinear's step, 8 experts with new sizes at each step,
// took 4.1 ms with the heuristic per size and 2.3 ms so on an H200).
//
// The workspace is shared by every GEMM of a runner: GEMMs of one runner must
// not run concurrently on different streams.
//
//===----------------------------------------------------------------------===//
#include "runtime/Gemm.h"

#include "runtime/CublasLt.h"
#include "runtime/CudaDriver.h"
#include "runtime/GemmTuning.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <algorithm>
#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

using namespace tejit::runtime;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;

namespace {

//===----------------------------------------------------------------------===//
// Names and small helpers
//===----------------------------------------------------------------------===//

/// cuBLASLt wants its workspace aligned to 256 bytes (TE aligns it too).
constexpr uintptr_t workspaceAlignment = 256;
/// The largest alignment the heuristic distinguishes (its preferences
/// default to 256): pointers aligned more strictly are all alike.
constexpr unsigned maxAlignmentLog2 = 8;
/// FP8 kernels need 16-byte aligned matrices, leading dimensions and
/// scalars (scales, amax).
constexpr int64_t fp8Alignment = 16;
/// Staging slots for FP8 scalars at the start of the workspace: A scale,
/// B scale, D scale, amax_D.
constexpr size_t scalarSlots = 4, scalarSlotBytes = 16;
static_assert(scalarSlots * scalarSlotBytes <= workspaceAlignment,
              "the scalar slots must fit before cuBLASLt's workspace");

Error makePlainError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

cudaDataType_t cudaType(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return CUDA_R_32F;
  case ElementType::F16:
    return CUDA_R_16F;
  case ElementType::BF16:
    return CUDA_R_16BF;
  case ElementType::F8E4M3:
    return CUDA_R_8F_E4M3;
  case ElementType::F8E5M2:
    return CUDA_R_8F_E5M2;
  default:
    // Callers check types first: only the five above reach here.
    return CUDA_R_32F;
  }
}

/// cuBLASLt's scale mode for an operand scaled so.
cublasLtMatmulMatrixScale_t scaleMode(GemmScaling scaling) {
  switch (scaling) {
  case GemmScaling::Tensor:
    return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  case GemmScaling::Block1D:
    return CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  case GemmScaling::Block2D:
    return CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
  }
  return CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
}

bool isFloat16Or32(ElementType type) {
  return type == ElementType::BF16 || type == ElementType::F16 ||
         type == ElementType::F32;
}
bool isFloat16(ElementType type) {
  return type == ElementType::BF16 || type == ElementType::F16;
}

StringRef epilogueName(cublasLtEpilogue_t epilogue) {
  switch (epilogue) {
  case CUBLASLT_EPILOGUE_DEFAULT:
    return "DEFAULT";
  case CUBLASLT_EPILOGUE_BIAS:
    return "BIAS";
  case CUBLASLT_EPILOGUE_GELU:
    return "GELU";
  case CUBLASLT_EPILOGUE_GELU_AUX:
    return "GELU_AUX";
  case CUBLASLT_EPILOGUE_GELU_BIAS:
    return "GELU_BIAS";
  case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
    return "GELU_AUX_BIAS";
  case CUBLASLT_EPILOGUE_DGELU:
    return "DGELU";
  case CUBLASLT_EPILOGUE_DGELU_BGRAD:
    return "DGELU_BGRAD";
  default:
    return "(another epilogue)";
  }
}

StringRef attributeName(cublasLtMatmulDescAttributes_t attribute) {
  switch (attribute) {
  case CUBLASLT_MATMUL_DESC_TRANSA:
    return "TRANSA";
  case CUBLASLT_MATMUL_DESC_TRANSB:
    return "TRANSB";
  case CUBLASLT_MATMUL_DESC_FAST_ACCUM:
    return "FAST_ACCUM";
  case CUBLASLT_MATMUL_DESC_EPILOGUE:
    return "EPILOGUE";
  case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
    return "BIAS_DATA_TYPE";
  case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
    return "BIAS_POINTER";
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD:
    return "EPILOGUE_AUX_LD";
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE:
    return "EPILOGUE_AUX_DATA_TYPE";
  case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER:
    return "EPILOGUE_AUX_POINTER";
  case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER:
    return "A_SCALE_POINTER";
  case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER:
    return "B_SCALE_POINTER";
  case CUBLASLT_MATMUL_DESC_A_SCALE_MODE:
    return "A_SCALE_MODE";
  case CUBLASLT_MATMUL_DESC_B_SCALE_MODE:
    return "B_SCALE_MODE";
  case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER:
    return "D_SCALE_POINTER";
  case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER:
    return "AMAX_D_POINTER";
  default:
    return "(another attribute)";
  }
}

/// "tensor<128x64xbf16>", as the plan spells it.
std::string typeString(const TensorType &type) {
  std::string text = "tensor<";
  for (int64_t dim : type.shape)
    text += std::to_string(dim) + "x";
  return text + elementTypeName(type.element).str() + ">";
}

/// "FP8 TN", "transpose_a, transpose_b", or "" for a plain NN GEMM.
std::string layoutNote(bool scaled, bool transposeA, bool transposeB) {
  if (scaled)
    return "FP8 TN";
  std::vector<StringRef> flags;
  if (transposeA)
    flags.push_back("transpose_a");
  if (transposeB)
    flags.push_back("transpose_b");
  return llvm::join(flags, ", ");
}

/// " (a, b)" for some notes, "" for none.
std::string parenthesized(llvm::ArrayRef<std::string> notes) {
  std::vector<std::string> present;
  for (const std::string &note : notes)
    if (!note.empty())
      present.push_back(note);
  return present.empty() ? "" : " (" + llvm::join(present, ", ") + ")";
}

/// log2 of the alignment of `pointer`, capped at 256 bytes; null (nothing
/// to read) counts as aligned to anything.
uint8_t alignmentLog2(const void *pointer) {
  auto address = reinterpret_cast<uintptr_t>(pointer);
  if (address == 0)
    return maxAlignmentLog2;
  return std::min<unsigned>(maxAlignmentLog2, llvm::countr_zero(address));
}

bool isAligned(const void *pointer, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % static_cast<uintptr_t>(bytes) ==
         0;
}

//===----------------------------------------------------------------------===//
// Problems
//===----------------------------------------------------------------------===//

/// Order of the pointers whose alignment is part of a problem.
enum AlignedPointer { AlignA, AlignB, AlignC, AlignD, AlignVector, AlignAux };

/// Everything that decides a problem's descriptors and algorithm. Sizes and
/// transposes are the plan's (row-major); the cuBLASLt view follows from them.
struct ProblemKey {
  int64_t m = 0, n = 0, k = 0;
  bool transposeA = false, transposeB = false;
  bool scaled = false, fastAccum = false;
  /// The plan's a and b (scaled GEMMs): cuBLASLt's B and A scale modes.
  GemmScaling aScaling = GemmScaling::Tensor, bScaling = GemmScaling::Tensor;
  ElementType a = ElementType::F32, b = ElementType::F32,
              out = ElementType::F32, c = ElementType::F32;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  /// The bias, or with DGELU_BGRAD the bias gradient (cuBLASLt's one
  /// "bias" vector).
  std::optional<ElementType> vector;
  std::optional<ElementType> aux;
  bool amaxD = false;
  /// beta = 1: C is a residual added to the product (else beta = 0).
  bool readsC = false;
  std::array<uint8_t, 6> alignments{};
  /// Elements between rows of the plan's a and b as stored (their leading
  /// dimensions in cuBLASLt's column-major view): the column count for
  /// packed matrices, more for a column range of a wider one.
  int64_t aRowStride = 0, bRowStride = 0;

  auto tie() const {
    return std::tie(m, n, k, transposeA, transposeB, scaled, fastAccum,
                    aScaling, bScaling, a, b, out, c, epilogue, vector, aux,
                    amaxD, readsC, alignments, aRowStride, bRowStride);
  }
  bool operator<(const ProblemKey &other) const { return tie() < other.tie(); }

  bool fp8Out() const { return isFp8(out); }
  bool blockScaled() const { return aScaling != GemmScaling::Tensor; }

  /// "M=128 N=256 K=64, f8E4M3FN x f8E4M3FN -> bf16 (TN, fast accumulation),
  /// epilogue GELU_AUX_BIAS (bias bf16, aux bf16)".
  std::string describe() const {
    std::string text = llvm::formatv("M={0} N={1} K={2}, {3} x {4} -> {5}", m,
                                     n, k, elementTypeName(a),
                                     elementTypeName(b), elementTypeName(out));
    std::string scales;
    if (blockScaled())
      scales = (gemmScalingName(aScaling) + " x " + gemmScalingName(bScaling) +
                " scales")
                   .str();
    std::string strides;
    if (aRowStride || bRowStride)
      strides =
          llvm::formatv("row strides a {0} b {1}", aRowStride, bRowStride);
    text += parenthesized({layoutNote(scaled, transposeA, transposeB), scales,
                           fastAccum ? "fast accumulation" : "",
                           c != out ? ("C " + elementTypeName(c)).str() : "",
                           strides});
    text += ", epilogue " + epilogueName(epilogue).str();
    std::string vectorNote;
    if (vector)
      vectorNote =
          (epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD ? "bias_grad " : "bias ") +
          elementTypeName(*vector).str();
    text += parenthesized(
        {vectorNote, aux ? "aux " + elementTypeName(*aux).str() : "",
         amaxD ? "amax_d" : "", readsC ? "+ residual C" : ""});
    return text;
  }

  std::string describeAlignments() const {
    static const char *const names[] = {"A", "B", "C", "D", "bias", "aux"};
    std::string text = "pointer alignments (bytes, up to 256):";
    for (size_t i = 0; i < alignments.size(); ++i)
      text += llvm::formatv(" {0} {1}", names[i], 1u << alignments[i]).str();
    return text;
  }
};

/// One run's problem and pointers, in cuBLASLt's terms (A is the plan's b).
struct Request {
  ProblemKey key;
  const void *a = nullptr, *b = nullptr, *c = nullptr;
  void *d = nullptr;
  const void *aScale = nullptr, *bScale = nullptr, *dScale = nullptr;
  void *amaxD = nullptr;
  /// BIAS_POINTER: the bias (read) or the bias gradient (written).
  void *vector = nullptr;
  void *aux = nullptr;
  /// GemmStep::sizesVary.
  bool sizesVary = false;
};

/// A problem's cuBLASLt objects and algorithm, made on its first run.
struct Problem {
  explicit Problem(const CublasLt &lib) : lib(lib) {}
  ~Problem() {
    if (desc)
      lib.cublasLtMatmulDescDestroy(desc);
    for (cublasLtMatrixLayout_t layout : {aLayout, bLayout, cLayout, dLayout})
      if (layout)
        lib.cublasLtMatrixLayoutDestroy(layout);
  }
  Problem(const Problem &) = delete;
  Problem &operator=(const Problem &) = delete;

  const CublasLt &lib;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t aLayout = nullptr, bLayout = nullptr,
                         cLayout = nullptr, dLayout = nullptr;
  cublasLtMatmulAlgo_t algo{};
  /// The pointer attributes live in `desc` from setting them to
  /// cublasLtMatmul reading them: runs of one problem on several threads
  /// take turns.
  std::mutex mutex;
};

template <typename T>
Error setAttribute(const CublasLt &lib, cublasLtMatmulDesc_t desc,
                   cublasLtMatmulDescAttributes_t attribute, const T &value) {
  return lib.check(
      lib.cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(T)),
      "cublasLtMatmulDescSetAttribute(" + attributeName(attribute) + ")");
}

/// Sets the attributes that hold this run's pointers: every one the problem
/// uses, so none keeps a previous run's value.
Error setPointers(const CublasLt &lib, cublasLtMatmulDesc_t desc,
                  const Request &request) {
  const ProblemKey &key = request.key;
  if (key.scaled) {
    if (Error error = setAttribute(
            lib, desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, request.aScale))
      return error;
    if (Error error = setAttribute(
            lib, desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, request.bScale))
      return error;
  }
  if (key.fp8Out())
    if (Error error = setAttribute(
            lib, desc, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, request.dScale))
      return error;
  if (key.amaxD)
    if (Error error = setAttribute(
            lib, desc, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, request.amaxD))
      return error;
  if (key.vector)
    if (Error error = setAttribute(lib, desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                   request.vector))
      return error;
  if (key.aux)
    if (Error error = setAttribute(
            lib, desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, request.aux))
      return error;
  return Error::success();
}

/// RAII for the heuristic's preference descriptor.
struct PreferenceGuard {
  explicit PreferenceGuard(const CublasLt &lib) : lib(lib) {}
  ~PreferenceGuard() {
    if (preference)
      lib.cublasLtMatmulPreferenceDestroy(preference);
  }
  const CublasLt &lib;
  cublasLtMatmulPreference_t preference = nullptr;
};

/// Whether `problem` can run `algo` in `workspaceBytes` (else why not, in
/// `why`): cublasLtMatmulAlgoCheck, which does not see the pointers.
bool algoRuns(const CublasLt &lib, cublasLtHandle_t handle,
              const Problem &problem, const cublasLtMatmulAlgo_t &algo,
              size_t workspaceBytes, std::string &why) {
  cublasLtMatmulHeuristicResult_t result{};
  cublasStatus_t status = lib.cublasLtMatmulAlgoCheck(
      handle, problem.desc, problem.aLayout, problem.bLayout, problem.cLayout,
      problem.dLayout, &algo, &result);
  if (status == CUBLAS_STATUS_SUCCESS)
    status = result.state;
  if (status != CUBLAS_STATUS_SUCCESS) {
    why = "cublasLtMatmulAlgoCheck: " + lib.statusText(status);
    return false;
  }
  if (result.workspaceSize > workspaceBytes) {
    why = llvm::formatv("it needs {0} bytes of workspace, {1} are there",
                        result.workspaceSize, workspaceBytes);
    return false;
  }
  return true;
}

/// The tuned algorithm `tuned` names, if `problem` can run it in
/// `workspaceBytes`; none (with the reason in `why`) otherwise.
std::optional<cublasLtMatmulAlgo_t>
tunedAlgo(const CublasLt &lib, cublasLtHandle_t handle, const Problem &problem,
          const ProblemKey &key, const TunedGemm &tuned, size_t workspaceBytes,
          std::string &why) {
  // The measurement ran on 256-byte aligned buffers (cuMemAlloc's); a kernel
  // picked there may assume as much, and cublasLtMatmulAlgoCheck does not
  // see the pointers.
  for (AlignedPointer which : {AlignA, AlignB, AlignC, AlignD})
    if (key.alignments[which] < maxAlignmentLog2) {
      why = "a matrix is not 256-byte aligned";
      return std::nullopt;
    }
  Expected<cublasLtMatmulAlgo_t> algo =
      lib.algoOf(handle, tuned.algo, cudaType(key.b), cudaType(key.a),
                 cudaType(key.c), cudaType(key.out));
  if (!algo) {
    why = llvm::toString(algo.takeError());
    return std::nullopt;
  }
  if (!algoRuns(lib, handle, problem, *algo, workspaceBytes, why))
    return std::nullopt;
  return *algo;
}

/// Makes the descriptors of `request`'s problem and picks its algorithm, for
/// `workspaceBytes` of workspace: `classAlgo` (its size class's) when given
/// and the problem can run it, else `tuned`'s when given and the problem
/// can run it, else the heuristic's first. `choice` says which was taken.
Expected<std::unique_ptr<Problem>>
createProblem(const CublasLt &lib, cublasLtHandle_t handle,
              const Request &request, size_t workspaceBytes,
              const TunedGemm *tuned, std::string &choice,
              const cublasLtMatmulAlgo_t *classAlgo = nullptr) {
  const ProblemKey &key = request.key;
  auto problem = std::make_unique<Problem>(lib);
  cublasLtMatmulDesc_t &desc = problem->desc;
  if (Error error = lib.check(
          lib.cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
          "cublasLtMatmulDescCreate"))
    return std::move(error);

  // cuBLASLt's A is the plan's b, its B the plan's a (see the file comment).
  int32_t transA = key.transposeB ? CUBLAS_OP_T : CUBLAS_OP_N;
  int32_t transB = key.transposeA ? CUBLAS_OP_T : CUBLAS_OP_N;
  uint32_t epilogue = key.epilogue;
  if (Error error =
          setAttribute(lib, desc, CUBLASLT_MATMUL_DESC_TRANSA, transA))
    return std::move(error);
  if (Error error =
          setAttribute(lib, desc, CUBLASLT_MATMUL_DESC_TRANSB, transB))
    return std::move(error);
  if (Error error =
          setAttribute(lib, desc, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue))
    return std::move(error);
  if (key.scaled) {
    int8_t fastAccum = key.fastAccum ? 1 : 0;
    if (Error error =
            setAttribute(lib, desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fastAccum))
      return std::move(error);
  }
  // Block scales: cuBLASLt's A is the plan's b, its B the plan's a. One
  // scale per tensor is the default mode, left unset as before.
  if (key.blockScaled()) {
    int32_t modeA = scaleMode(key.bScaling), modeB = scaleMode(key.aScaling);
    if (Error error =
            setAttribute(lib, desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, modeA))
      return std::move(error);
    if (Error error =
            setAttribute(lib, desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, modeB))
      return std::move(error);
  }
  // The bias type defaults to D's, except for FP8 GEMMs, whose default
  // depends on D's type: those always say it; others only when it differs.
  if (key.vector && (key.scaled || *key.vector != key.out)) {
    int32_t type = cudaType(*key.vector);
    if (Error error =
            setAttribute(lib, desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, type))
      return std::move(error);
  }
  if (key.aux) {
    int64_t ld = key.n;
    int32_t type = cudaType(*key.aux);
    if (Error error =
            setAttribute(lib, desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, ld))
      return std::move(error);
    if (Error error = setAttribute(
            lib, desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, type))
      return std::move(error);
  }

  // Layouts give the stored (un-transposed) shapes: rows, columns, ld.
  // `ld` 0: packed (ld = rows).
  auto makeLayout = [&](cublasLtMatrixLayout_t &layout, ElementType type,
                        int64_t rows, int64_t cols, int64_t ld,
                        StringRef which) {
    return lib.check(lib.cublasLtMatrixLayoutCreate(&layout, cudaType(type),
                                                    rows, cols, ld ? ld : rows),
                     "cublasLtMatrixLayoutCreate(" + which + ")");
  };
  int64_t m = key.m, n = key.n, k = key.k;
  if (Error error =
          makeLayout(problem->aLayout, key.b, key.transposeB ? k : n,
                     key.transposeB ? n : k, key.bRowStride, "A, the plan's b"))
    return std::move(error);
  if (Error error =
          makeLayout(problem->bLayout, key.a, key.transposeA ? m : k,
                     key.transposeA ? k : m, key.aRowStride, "B, the plan's a"))
    return std::move(error);
  if (Error error = makeLayout(problem->cLayout, key.c, n, m, 0, "C"))
    return std::move(error);
  if (Error error = makeLayout(problem->dLayout, key.out, n, m, 0, "D, out"))
    return std::move(error);

  // The heuristic reads the bias and aux pointers' alignment off the
  // descriptor; the key holds those alignments, so this run's pointers stand
  // for every run of the problem.
  if (Error error = setPointers(lib, desc, request))
    return std::move(error);

  // The heuristic costs tens of microseconds a call; a size class's
  // algorithm only its check.
  std::string classWhy;
  if (classAlgo &&
      algoRuns(lib, handle, *problem, *classAlgo, workspaceBytes, classWhy)) {
    problem->algo = *classAlgo;
    choice = "its size class's algorithm";
    return std::move(problem);
  }

  PreferenceGuard guard(lib);
  if (Error error =
          lib.check(lib.cublasLtMatmulPreferenceCreate(&guard.preference),
                    "cublasLtMatmulPreferenceCreate"))
    return std::move(error);
  uint64_t maxWorkspace = workspaceBytes;
  if (Error error = lib.check(lib.cublasLtMatmulPreferenceSetAttribute(
                                  guard.preference,
                                  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                  &maxWorkspace, sizeof(maxWorkspace)),
                              "cublasLtMatmulPreferenceSetAttribute("
                              "MAX_WORKSPACE_BYTES)"))
    return std::move(error);
  // The preferences default to 256-byte alignment, which would admit kernels
  // that fail on less aligned matrices.
  const std::pair<cublasLtMatmulPreferenceAttributes_t, AlignedPointer>
      alignments[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, AlignA},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, AlignB},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, AlignC},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, AlignD}};
  for (auto [attribute, which] : alignments) {
    uint32_t bytes = 1u << key.alignments[which];
    if (Error error =
            lib.check(lib.cublasLtMatmulPreferenceSetAttribute(
                          guard.preference, attribute, &bytes, sizeof(bytes)),
                      "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)"))
      return std::move(error);
  }

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t status = lib.cublasLtMatmulAlgoGetHeuristic(
      handle, desc, problem->aLayout, problem->bLayout, problem->cLayout,
      problem->dLayout, guard.preference, 1, &result, &found);
  if (status == CUBLAS_STATUS_SUCCESS && found > 0 &&
      result.state == CUBLAS_STATUS_SUCCESS) {
    problem->algo = result.algo;
    std::string why;
    if (tuned) {
      if (std::optional<cublasLtMatmulAlgo_t> algo = tunedAlgo(
              lib, handle, *problem, key, *tuned, workspaceBytes, why)) {
        problem->algo = *algo;
        choice = "the tuning file's " + tuned->algo.describe();
        return std::move(problem);
      }
      why = " (the tuning file's " + tuned->algo.describe() +
            " does not run here: " + why + ")";
    }
    Expected<AlgoConfig> config = lib.configOf(result.algo);
    choice =
        "the heuristic's first, " +
        (config ? config->describe() : llvm::toString(config.takeError())) +
        why;
    return std::move(problem);
  }
  // NOT_SUPPORTED is how cuBLASLt says no kernel fits: the usual causes are
  // a type combination it lacks for this epilogue, or alignment.
  if (status == CUBLAS_STATUS_SUCCESS)
    status = found > 0 ? result.state : CUBLAS_STATUS_NOT_SUPPORTED;
  return makeError(
      ErrorCode::Cublas,
      llvm::formatv("cuBLASLt {0} ({1}) has no algorithm for this GEMM: {2} "
                    "(cublasLtMatmulAlgoGetHeuristic with {3} bytes of "
                    "workspace; {4})",
                    lib.versionString(), lib.path, lib.statusText(status),
                    workspaceBytes, key.describeAlignments()));
}

//===----------------------------------------------------------------------===//
// Checking a step
//===----------------------------------------------------------------------===//

/// "gemm tensor<128x64xf8E4M3FN> x tensor<256x64xf8E4M3FN> (FP8 TN) ->
/// tensor<128x256xbf16>": names a step before its sizes are known good.
std::string describeStep(const GemmStep &step) {
  std::string layout = parenthesized(
      {layoutNote(step.scaled, step.transposeA, step.transposeB)});
  return llvm::formatv("gemm {0} x {1}{2} -> {3}", typeString(step.aType),
                       typeString(step.bType), layout,
                       typeString(step.outType));
}

/// Checks `step` against what cuBLASLt can run and gathers its problem key
/// and pointers. Errors: plain ones for a step the plan parser should not
/// have let through, ErrorCode::Unsupported for a valid GEMM cuBLASLt (or
/// this runner) cannot run, ErrorCode::InvalidArgument for bad pointers.
Expected<Request> analyze(const GemmStep &step, const FunctionPlan &function,
                          const GemmPointers &pointers) {
  auto planError = [&](const llvm::Twine &why) {
    return makePlainError(describeStep(step) + ": " + why);
  };
  auto unsupported = [&](const llvm::Twine &why) {
    return makeError(ErrorCode::Unsupported, describeStep(step) + ": " + why);
  };
  auto badPointer = [&](const llvm::Twine &why) {
    return makeError(ErrorCode::InvalidArgument,
                     describeStep(step) + ": " + why);
  };

  // Sizes. FP8 GEMMs are always TN: a [M,K], b [N,K].
  const std::vector<int64_t> &aShape = step.aType.shape,
                             &bShape = step.bType.shape,
                             &outShape = step.outType.shape;
  if (aShape.size() != 2 || bShape.size() != 2 || outShape.size() != 2)
    return planError("a, b and out must be matrices");
  bool transposeA = !step.scaled && step.transposeA;
  bool transposeB = step.scaled || step.transposeB;
  int64_t m = transposeA ? aShape[1] : aShape[0];
  int64_t k = transposeA ? aShape[0] : aShape[1];
  int64_t kOfB = transposeB ? bShape[1] : bShape[0];
  int64_t n = transposeB ? bShape[0] : bShape[1];
  if (k != kOfB)
    return planError(
        llvm::formatv("op(a) is [{0}, {1}] but op(b) is [{2}, {3}]: K differs",
                      m, k, kOfB, n));
  if (outShape[0] != m || outShape[1] != n)
    return planError(
        llvm::formatv("out must be [{0}, {1}] (M, N)", m, n).str());
  if (m <= 0 || n <= 0 || k <= 0)
    return unsupported(llvm::formatv(
        "M={0} N={1} K={2}: cuBLASLt does not take empty matrices", m, n, k));

  // Operand and output types.
  ElementType aType = step.aType.element, bType = step.bType.element,
              outType = step.outType.element;
  bool fp8Out = isFp8(outType);
  if (step.scaled) {
    if (!isFp8(aType) || !isFp8(bType))
      return planError("a scaled (FP8) GEMM needs FP8 operands");
    if (aType == ElementType::F8E5M2 && bType == ElementType::F8E5M2)
      return unsupported("E5M2 x E5M2 GEMMs are not supported by FP8 tensor "
                         "cores: one operand must be E4M3");
    if (!isFloat16Or32(outType) && !fp8Out)
      return planError("an FP8 GEMM's out must be bf16, f16, f32 or FP8");
  } else {
    if (isFp8(aType) || isFp8(bType))
      return planError("FP8 operands need a scaled GEMM (layout TN, with "
                       "scale_inv)");
    if (aType != bType || !isFloat16Or32(aType))
      return unsupported("operands must be two bf16, two f16 or two f32 "
                         "matrices");
    if (outType != aType && outType != ElementType::F32)
      return unsupported(llvm::formatv(
          "out must be {0} or f32 for {0} operands", elementTypeName(aType)));
  }

  // Block scales (see the file comment).
  const GemmEpilogue &epilogue = step.epilogue;
  bool aBlocks = step.scaled && step.aScaling != GemmScaling::Tensor;
  bool bBlocks = step.scaled && step.bScaling != GemmScaling::Tensor;
  if (aBlocks != bBlocks)
    return planError(llvm::formatv(
        "a is scaled by {0} and b by {1}: both operands are block-scaled or "
        "neither",
        gemmScalingName(step.aScaling), gemmScalingName(step.bScaling)));
  if (aBlocks) {
    if (step.aScaling == GemmScaling::Block2D &&
        step.bScaling == GemmScaling::Block2D)
      return unsupported("cuBLASLt has no GEMM of two 2-D block-scaled "
                         "operands (block_2d x block_2d)");
    if (step.fastAccum)
      return planError("block-scaled GEMMs accumulate without fast_accum");
    if (fp8Out)
      return unsupported("a block-scaled GEMM's out must be bf16, f16 or "
                         "f32");
    // A residual is cuBLASLt's C with beta = 1, not an epilogue: the wgrad
    // GEMM adds into main_grad that way (fuse_wgrad_accumulation).
    if (epilogue.bias || epilogue.aux || epilogue.dScale || epilogue.amaxD ||
        epilogue.biasGrad || epilogue.gelu || epilogue.dgelu)
      return unsupported("block-scaled GEMMs run without an epilogue but a "
                         "residual (docs/block-scaling.md)");
  }

  // The epilogue.
  auto valueType = [&](int64_t id,
                       StringRef role) -> Expected<const TensorType *> {
    if (id < 0 || static_cast<size_t>(id) >= function.values.size())
      return planError(
          llvm::formatv("{0} is value {1}, which {2} does not have", role, id,
                        function.name));
    return &function.values[id].type;
  };
  if (epilogue.gelu && epilogue.dgelu)
    return planError("gelu and dgelu in one epilogue");
  if (epilogue.biasGrad && !epilogue.dgelu)
    return unsupported("bias_grad is only fused together with dgelu "
                       "(DGELU_BGRAD); a bias gradient alone is not a GEMM "
                       "epilogue tejit runs");
  if (epilogue.dgelu && epilogue.bias)
    return unsupported("dgelu with a bias is not a cuBLASLt epilogue");
  if (epilogue.dgelu && !epilogue.aux)
    return planError("dgelu needs aux, the forward GELU's input");
  if (epilogue.aux && !epilogue.gelu && !epilogue.dgelu)
    return planError("aux without gelu or dgelu");

  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  if (epilogue.dgelu)
    kind = epilogue.biasGrad ? CUBLASLT_EPILOGUE_DGELU_BGRAD
                             : CUBLASLT_EPILOGUE_DGELU;
  else if (epilogue.gelu && epilogue.bias)
    kind = epilogue.aux ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                        : CUBLASLT_EPILOGUE_GELU_BIAS;
  else if (epilogue.gelu)
    kind = epilogue.aux ? CUBLASLT_EPILOGUE_GELU_AUX : CUBLASLT_EPILOGUE_GELU;
  else if (epilogue.bias)
    kind = CUBLASLT_EPILOGUE_BIAS;

  // The bias or bias gradient: a vector of out's last dimension.
  std::optional<ElementType> vectorType;
  if (std::optional<int64_t> id =
          epilogue.biasGrad ? epilogue.biasGrad : epilogue.bias) {
    StringRef role = epilogue.biasGrad ? "bias_grad" : "bias";
    Expected<const TensorType *> type = valueType(*id, role);
    if (!type)
      return type.takeError();
    if ((*type)->shape.size() != 1 || (*type)->shape[0] != n)
      return planError(llvm::formatv("{0} is {1}; it must be [{2}] (N)", role,
                                     typeString(**type), n));
    ElementType element = (*type)->element;
    if (step.scaled ? !isFloat16(element) : !isFloat16Or32(element))
      return unsupported(
          llvm::formatv("{0} is {1}; {2} GEMMs take a {3} {0}", role,
                        elementTypeName(element), step.scaled ? "FP8" : "these",
                        step.scaled ? "bf16 or f16" : "bf16, f16 or f32"));
    vectorType = element;
  }
  // aux: out's shape and layout, ld N.
  std::optional<ElementType> auxType;
  if (epilogue.aux) {
    Expected<const TensorType *> type = valueType(*epilogue.aux, "aux");
    if (!type)
      return type.takeError();
    if ((*type)->shape != outShape)
      return planError(llvm::formatv("aux is {0}; it must have out's shape",
                                     typeString(**type)));
    ElementType element = (*type)->element;
    if (isFp8(element))
      return unsupported("an FP8 aux needs its own scale and amax, which "
                         "plans do not carry");
    if (step.scaled ? !isFloat16(element) : !isFloat16Or32(element))
      return unsupported(
          llvm::formatv("aux is {0}; {1} GEMMs take {2}",
                        elementTypeName(element), step.scaled ? "FP8" : "these",
                        step.scaled ? "bf16 or f16" : "bf16, f16 or f32"));
    if (n % 8 != 0)
      return unsupported(llvm::formatv(
          "cuBLASLt needs the aux leading dimension, N = {0}, to be a "
          "multiple of 8",
          n));
    auxType = element;
  }
  // residual: out's type and shape, read as C with beta = 1 (cuBLASLt adds
  // alpha A B + beta C, then the bias).
  if (epilogue.residual) {
    if (fp8Out)
      return unsupported("a residual needs a bf16, f16 or f32 out (an FP8 "
                         "out's C has another type)");
    if (epilogue.gelu || epilogue.dgelu)
      return unsupported("a residual is added with no epilogue or a bias "
                         "only");
    Expected<const TensorType *> type =
        valueType(*epilogue.residual, "residual");
    if (!type)
      return type.takeError();
    if ((*type)->shape != outShape || (*type)->element != outType)
      return planError(llvm::formatv("residual is {0}; it must have out's "
                                     "shape and type ({1})",
                                     typeString(**type),
                                     elementTypeName(outType)));
  }
  // FP8 output: the plan's quantize.
  if (fp8Out && !epilogue.dScale)
    return planError("an FP8 out needs d_scale");
  if (!fp8Out && (epilogue.dScale || epilogue.amaxD))
    return unsupported("d_scale and amax_d need an FP8 out (cuBLASLt computes "
                       "amax_D only for FP8 outputs)");

  // C: the residual, else unused (beta = 0) but typed. An FP8 D takes a
  // 16-bit C of the bias's type.
  ElementType cType = outType;
  if (fp8Out) {
    if (vectorType)
      cType = *vectorType;
    else if (auxType && isFloat16(*auxType))
      cType = *auxType;
    else
      cType = ElementType::BF16;
  }

  // Row strides (a column range of a wider matrix): at least a row.
  for (auto [name, stride, columns] :
       {std::tuple{"a", pointers.aRowStride, aShape[1]},
        std::tuple{"b", pointers.bRowStride, bShape[1]}}) {
    if (stride && stride < columns)
      return planError(
          llvm::formatv("{0}'s row stride {1} is less than its {2} columns",
                        name, stride, columns));
    if (stride && step.scaled && stride % fp8Alignment != 0)
      return unsupported(llvm::formatv(
          "FP8 GEMMs need 16-byte leading dimensions: {0}'s row stride {1} "
          "must be a multiple of 16",
          name, stride));
  }
  // FP8 kernels need 16-byte leading dimensions: K bytes for A and B, N
  // elements of D.
  if (step.scaled &&
      (k % fp8Alignment != 0 ||
       (n * static_cast<int64_t>(elementBytes(outType))) % fp8Alignment != 0))
    return unsupported(llvm::formatv(
        "FP8 GEMMs need 16-byte leading dimensions: K = {0} must be a "
        "multiple of 16 and N = {1} {2} elements a multiple of 16 bytes",
        k, n, elementTypeName(outType)));

  // Pointers: present where the step names them, aligned to their element
  // (16 bytes for FP8 GEMMs' matrices; scales and amaxes are single floats).
  struct Check {
    const void *pointer;
    bool needed;
    StringRef name;
    int64_t alignment;
  };
  int64_t matrixAlignment =
      step.scaled ? fp8Alignment : static_cast<int64_t>(elementBytes(aType));
  const Check checks[] = {
      {pointers.a, true, "a", matrixAlignment},
      {pointers.b, true, "b", matrixAlignment},
      {pointers.out, true, "out",
       step.scaled ? fp8Alignment
                   : static_cast<int64_t>(elementBytes(outType))},
      // Single scales are staged when misaligned; block scales cannot be.
      {pointers.aScaleInv, step.scaled, "a_scale_inv",
       aBlocks ? fp8Alignment : 4},
      {pointers.bScaleInv, step.scaled, "b_scale_inv",
       bBlocks ? fp8Alignment : 4},
      {pointers.bias, epilogue.bias.has_value(), "bias",
       vectorType ? static_cast<int64_t>(elementBytes(*vectorType)) : 1},
      {pointers.aux, epilogue.aux.has_value(), "aux",
       auxType ? static_cast<int64_t>(elementBytes(*auxType)) : 1},
      {pointers.dScale, fp8Out, "d_scale", 4},
      {pointers.amaxD, epilogue.amaxD.has_value(), "amax_d", 4},
      {pointers.biasGrad, epilogue.biasGrad.has_value(), "bias_grad",
       vectorType ? static_cast<int64_t>(elementBytes(*vectorType)) : 1},
      {pointers.residual, epilogue.residual.has_value(), "residual",
       static_cast<int64_t>(elementBytes(outType))},
  };
  for (const Check &check : checks) {
    if (!check.needed)
      continue;
    if (!check.pointer)
      return badPointer("no device pointer for " + check.name);
    if (!isAligned(check.pointer, check.alignment))
      return badPointer(llvm::formatv("{0} at {1} is not aligned to {2} bytes",
                                      check.name, check.pointer,
                                      check.alignment));
  }

  Request request;
  request.sizesVary = step.sizesVary;
  ProblemKey &key = request.key;
  key.m = m;
  key.n = n;
  key.k = k;
  key.transposeA = transposeA;
  key.transposeB = transposeB;
  key.scaled = step.scaled;
  key.fastAccum = step.scaled && step.fastAccum;
  if (step.scaled) {
    key.aScaling = step.aScaling;
    key.bScaling = step.bScaling;
  }
  key.a = aType;
  key.b = bType;
  key.out = outType;
  key.c = cType;
  key.epilogue = kind;
  key.vector = vectorType;
  key.aux = auxType;
  key.amaxD = epilogue.amaxD.has_value();
  key.readsC = epilogue.residual.has_value();
  // A stride equal to the row is packed: one key for both spellings.
  key.aRowStride = pointers.aRowStride == aShape[1] ? 0 : pointers.aRowStride;
  key.bRowStride = pointers.bRowStride == bShape[1] ? 0 : pointers.bRowStride;

  request.a = pointers.b;
  request.b = pointers.a;
  request.d = pointers.out;
  // With a residual, C is it (it may be out itself: in place, same layout).
  // Else beta = 0: C is never read. An FP8 D has a C of another type, so C
  // cannot alias it; cuBLASLt takes null there.
  if (key.readsC)
    request.c = pointers.residual;
  else
    request.c = fp8Out ? nullptr : pointers.out;
  if (step.scaled) {
    request.aScale = pointers.bScaleInv;
    request.bScale = pointers.aScaleInv;
  }
  if (fp8Out) {
    request.dScale = pointers.dScale;
    request.amaxD = epilogue.amaxD ? pointers.amaxD : nullptr;
  }
  if (epilogue.biasGrad)
    request.vector = pointers.biasGrad;
  else if (epilogue.bias)
    // cuBLASLt takes one attribute for the bias it reads and the bias
    // gradient it writes; the bias is only read.
    request.vector = const_cast<void *>(pointers.bias);
  if (epilogue.aux)
    request.aux = pointers.aux;
  key.alignments = {alignmentLog2(request.a),      alignmentLog2(request.b),
                    alignmentLog2(request.c),      alignmentLog2(request.d),
                    alignmentLog2(request.vector), alignmentLog2(request.aux)};
  return request;
}

//===----------------------------------------------------------------------===//
// Tuning files
//===----------------------------------------------------------------------===//

/// The tuning file TEJIT_GEMM_TUNING names, if its entries apply to
/// `deviceName` with cuBLASLt `version`; null when none is named or it was
/// measured elsewhere (said once on stderr). A file that cannot be read or
/// parsed is an error. Files are read once per process.
Expected<std::shared_ptr<const GemmTuning>>
tuningFromEnvironment(StringRef deviceName, StringRef version) {
  const char *path = std::getenv("TEJIT_GEMM_TUNING");
  if (!path || !*path)
    return nullptr;
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<const GemmTuning>> loaded;
  static std::set<std::string> warned;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = loaded.find(path);
  if (found == loaded.end()) {
    Expected<GemmTuning> tuning = GemmTuning::load(path);
    if (!tuning)
      return annotate(tuning.takeError(), "TEJIT_GEMM_TUNING",
                      ErrorCode::InvalidArgument);
    found = loaded
                .emplace(path,
                         std::make_shared<const GemmTuning>(std::move(*tuning)))
                .first;
  }
  std::string mismatch = found->second->mismatch(deviceName, version);
  if (mismatch.empty())
    return found->second;
  if (warned.insert(std::string(path) + "\n" + deviceName.str()).second)
    llvm::errs() << "tejit: warning: not using the GEMM tuning file " << path
                 << " (TEJIT_GEMM_TUNING): " << mismatch
                 << "; cuBLASLt's heuristic picks every algorithm\n";
  return nullptr;
}

//===----------------------------------------------------------------------===//
// The runner
//===----------------------------------------------------------------------===//

class CublasLtGemmRunner final : public GemmRunner {
public:
  CublasLtGemmRunner(const CublasLt &lib, const CudaDriver &driver,
                     cublasLtHandle_t handle, CUdeviceptr scalars,
                     void *workspace, size_t workspaceBytes,
                     std::shared_ptr<const GemmTuning> tuning, bool logChoices)
      : lib(lib), driver(driver), handle(handle), scalars(scalars),
        workspace(workspace), workspaceBytes(workspaceBytes),
        tuning(std::move(tuning)), logChoices(logChoices) {}

  ~CublasLtGemmRunner() override {
    // Descriptors first: they belong to the handle's library state.
    problems.clear();
    lib.cublasLtDestroy(handle);
  }

  Error run(const GemmStep &step, const FunctionPlan &function,
            const GemmPointers &pointers, void *stream) override;

private:
  /// The cached problem of `request`, created on first use.
  Expected<Problem *> problemFor(const Request &request);
  /// Points `request`'s FP8 scalars that are not 16-byte aligned at the
  /// staging slots, enqueueing the copies of the inputs into them; sets
  /// `stagedAmax` to the amax_d that must be copied out after the GEMM.
  Error stageScalars(Request &request, CUstream stream,
                     CUdeviceptr &stagedAmax);

  const CublasLt &lib;
  const CudaDriver &driver;
  cublasLtHandle_t handle;
  /// Four 16-byte slots (A scale, B scale, D scale, amax_D) at the start of
  /// the workspace, or 0 without a workspace.
  CUdeviceptr scalars;
  /// The rest of the workspace, for cuBLASLt.
  void *workspace;
  size_t workspaceBytes;
  /// Measured algorithms for this device (TEJIT_GEMM_TUNING), or null.
  std::shared_ptr<const GemmTuning> tuning;
  /// Whether each new problem's algorithm is reported (TEJIT_LOG_GEMMS).
  bool logChoices;
  /// Guards `problems` (the map, not the problems' descriptors).
  std::mutex problemsMutex;
  /// Problems are never evicted: a plan has a handful of GEMMs (grouped
  /// GEMMs one per group size seen, at most tokens / 16 per GEMM).
  std::map<ProblemKey, std::unique_ptr<Problem>> problems;
  /// Requests whose sizes vary (GemmStep::sizesVary): the algorithm of each
  /// size class (the key with M and K replaced by their gemmSizeClass), the
  /// heuristic's pick for the first problem of the class.
  std::map<ProblemKey, cublasLtMatmulAlgo_t> classAlgos;
};

Expected<Problem *> CublasLtGemmRunner::problemFor(const Request &request) {
  std::lock_guard<std::mutex> lock(problemsMutex);
  auto it = problems.find(request.key);
  if (it != problems.end())
    return it->second.get();
  // Failures are not cached: the step fails again, with the same message,
  // on every run.
  const ProblemKey &key = request.key;
  const TunedGemm *tuned =
      tuning && key.scaled
          ? tuning->find(key.m, key.n, key.k, key.a, key.b, key.fastAccum,
                         key.aScaling, key.bScaling)
          : nullptr;
  std::optional<ProblemKey> classKey;
  const cublasLtMatmulAlgo_t *classAlgo = nullptr;
  if (request.sizesVary) {
    // Everything but M and K, the scale modes included: a block-scaled
    // group never reuses a per-tensor problem's algorithm, nor 1-D x 2-D
    // one of 1-D x 1-D.
    classKey = key;
    classKey->m = gemmSizeClass(key.m);
    classKey->k = gemmSizeClass(key.k);
    auto known = classAlgos.find(*classKey);
    if (known != classAlgos.end())
      classAlgo = &known->second;
  }
  std::string choice;
  Expected<std::unique_ptr<Problem>> created = createProblem(
      lib, handle, request, workspaceBytes, tuned, choice, classAlgo);
  if (!created)
    return created.takeError();
  if (logChoices)
    llvm::errs() << "tejit: GEMM " << key.describe() << ": " << choice << "\n";
  Problem *problem = created->get();
  if (classKey && !classAlgo)
    classAlgos.emplace(*classKey, problem->algo);
  problems.emplace(request.key, std::move(*created));
  return problem;
}

Error CublasLtGemmRunner::stageScalars(Request &request, CUstream stream,
                                       CUdeviceptr &stagedAmax) {
  stagedAmax = 0;
  struct Scalar {
    const void **input;
    void **output;
    StringRef name;
    /// A block scale tensor, not a scalar: never staged (analyze() checked
    /// its alignment).
    bool blocks;
  };
  const ProblemKey &key = request.key;
  const Scalar staged[scalarSlots] = {
      {&request.aScale, nullptr, "b_scale_inv (cuBLASLt's A scale)",
       key.bScaling != GemmScaling::Tensor},
      {&request.bScale, nullptr, "a_scale_inv (cuBLASLt's B scale)",
       key.aScaling != GemmScaling::Tensor},
      {&request.dScale, nullptr, "d_scale", false},
      {nullptr, &request.amaxD, "amax_d", false}};
  for (auto [slot, scalar] : llvm::enumerate(staged)) {
    const void *pointer = scalar.input ? *scalar.input : *scalar.output;
    if (!pointer || scalar.blocks || isAligned(pointer, fp8Alignment))
      continue;
    if (!scalars)
      return makeError(
          ErrorCode::Unsupported,
          llvm::formatv("{0} at {1} is not 16-byte aligned, which cuBLASLt's "
                        "FP8 GEMMs need, and the runner has no workspace to "
                        "stage it in",
                        scalar.name, pointer));
    CUdeviceptr slotAddress = scalars + slot * scalarSlotBytes;
    if (scalar.input) {
      if (Error error = driver.check(
              driver.cuMemcpyDtoDAsync(slotAddress,
                                       reinterpret_cast<CUdeviceptr>(pointer),
                                       sizeof(float), stream),
              "staging " + scalar.name + " for cuBLASLt"))
        return error;
      *scalar.input = reinterpret_cast<const void *>(slotAddress);
    } else {
      stagedAmax = reinterpret_cast<CUdeviceptr>(pointer);
      *scalar.output = reinterpret_cast<void *>(slotAddress);
    }
  }
  return Error::success();
}

Error CublasLtGemmRunner::run(const GemmStep &step,
                              const FunctionPlan &function,
                              const GemmPointers &pointers, void *stream) {
  Expected<Request> request = analyze(step, function, pointers);
  if (!request)
    return request.takeError();
  // Every failure from here on names the problem.
  auto withProblem = [&](Error error) {
    return annotate(std::move(error), request->key.describe(),
                    ErrorCode::Cublas);
  };
  Expected<Problem *> problem = problemFor(*request);
  if (!problem)
    return withProblem(problem.takeError());

  auto cuStream = static_cast<CUstream>(stream);
  CUdeviceptr stagedAmax = 0;
  if (Error error = stageScalars(*request, cuStream, stagedAmax))
    return withProblem(std::move(error));

  static const float one = 1.0f, zero = 0.0f;
  {
    std::lock_guard<std::mutex> lock((*problem)->mutex);
    if (Error error = setPointers(lib, (*problem)->desc, *request))
      return withProblem(std::move(error));
    cublasStatus_t status = lib.cublasLtMatmul(
        handle, (*problem)->desc, &one, request->a, (*problem)->aLayout,
        request->b, (*problem)->bLayout, request->key.readsC ? &one : &zero,
        request->c, (*problem)->cLayout, request->d, (*problem)->dLayout,
        &(*problem)->algo, workspace, workspaceBytes, cuStream);
    if (status != CUBLAS_STATUS_SUCCESS)
      return withProblem(lib.error(status, "cublasLtMatmul"));
  }
  if (stagedAmax)
    return withProblem(driver.check(
        driver.cuMemcpyDtoDAsync(stagedAmax,
                                 reinterpret_cast<CUdeviceptr>(request->amaxD),
                                 sizeof(float), cuStream),
        "copying a staged amax_d out"));
  return Error::success();
}

} // namespace

int64_t tejit::runtime::gemmSizeClass(int64_t size) {
  if (size <= 16)
    return 16;
  int64_t power = int64_t(llvm::bit_floor(uint64_t(size)));
  if (size == power)
    return power;
  return size <= power + power / 2 ? power + power / 2 : 2 * power;
}

Expected<std::unique_ptr<GemmRunner>> GemmRunner::create(void *workspace,
                                                         size_t workspaceBytes,
                                                         StringRef deviceName) {
  Expected<const CublasLt &> lib = CublasLt::get();
  if (!lib)
    return lib.takeError();
  Expected<std::shared_ptr<const GemmTuning>> tuning =
      tuningFromEnvironment(deviceName, lib->versionString());
  if (!tuning)
    return tuning.takeError();
  Expected<const CudaDriver &> driver = CudaDriver::get();
  if (!driver)
    return driver.takeError();
  cublasLtHandle_t handle = nullptr;
  if (Error error = lib->check(lib->cublasLtCreate(&handle),
                               "cublasLtCreate (cuBLASLt needs the CUDA "
                               "driver and a current context)"))
    return std::move(error);
  // The 256-byte aligned part of the workspace: its first 256 bytes stage
  // FP8 scalars, cuBLASLt gets the rest.
  auto address = reinterpret_cast<uintptr_t>(workspace);
  uintptr_t aligned = llvm::alignTo(address, workspaceAlignment);
  size_t skipped = aligned - address;
  CUdeviceptr scalars = 0;
  if (!workspace || workspaceBytes < skipped + workspaceAlignment) {
    workspace = nullptr;
    workspaceBytes = 0;
  } else {
    scalars = aligned;
    workspace = reinterpret_cast<void *>(aligned + workspaceAlignment);
    workspaceBytes -= skipped + workspaceAlignment;
  }
  const char *log = std::getenv("TEJIT_LOG_GEMMS");
  return std::make_unique<CublasLtGemmRunner>(
      *lib, *driver, handle, scalars, workspace, workspaceBytes,
      std::move(*tuning), log && *log && StringRef(log) != "0");
}
