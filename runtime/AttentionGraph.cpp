//===- AttentionGraph.cpp - cuDNN operation graphs for attention ----------===//
//
// cuDNN has single SDPA operation descriptors only from 9.13 (forward) and
// 9.17 (backward); for every cuDNN 9 a flash attention can be described as
// a graph of matmul, pointwise, reduction, RNG and reshape operations, which
// the runtime fusion engines recognize as a whole. The graph must therefore
// have exactly the structure the engines look for: the operation order, the
// data types of the virtual tensors and the by-value scalars below follow
// the composite pattern that NVIDIA's cudnn-frontend lowers its sdpa /
// sdpa_backward nodes to.
//
// Tensors are 4-D [b, h, s, d] views of the caller's layout (strides from
// AttentionLayout). K and V keep kv_heads heads: the matmuls broadcast them
// over groups of heads / kv_heads query heads (GQA, MQA), and in the
// backward dK and dV are reduced from full-head matmul results.
//
// Forward (S, P: [b, h, s_q, s_kv]; row tensors [b, h, s_q, 1]; all virtual
// tensors f32 unless marked io = the bf16/f16 input type):
//   S = matmul(Q, K^T)                 [m: seq_len_q, n: seq_len_kv]
//   S = S * scale                      (by-value f32)
//   padding: S = select(S, -inf, row < seq_len_q && col < seq_len_kv)
//   causal:  S = select(S, -inf, row >= col)
//   bottom-right causal: S = select(S, -inf,
//                                   row + seq_len_kv - seq_len_q >= col)
//   window left bound l: S = select(S, -inf, col + (l + 1) > row)
//   M = max_row(S); E = exp(S - M); Z = sum_row(E)
//   stats = M + log(Z)                 (f32 output)
//   P = E / Z                          (io unless dropout follows)
//   dropout: P = P * rng_bernoulli(1 - p, seed, offset) * (1 / (1 - p)) (io)
//   O = matmul(P, V)                   [m: seq_len_q, k: seq_len_kv]
//
// Backward:
//   D = sum_row(dO * O) * (1 - p)      (f32, a workspace tensor)
//   S = matmul(Q, K^T) * scale - stats, masked as above; E = exp(S)
//   P = E [* mask * 1/(1-p)]; P^T = reshape(P) (io)
//   dV = matmul(P^T, dO)               (GQA: reduce a full-head dV)
//   dP = matmul(dO, V^T) [* mask]; dS = (dP - D) * E [* 1/(1-p)] * scale
//   dK = matmul(reshape(dS) (io), Q)   (GQA: reduce a full-head dK)
//   dQacc = matmul(dS, reshape(K^T))   (f32, a workspace tensor)
//   dQ = identity(dQacc)
//
// Bias (docs/attention-bias.md), where cudnn-frontend puts it: right after
// `S = S * scale` (forward and backward), S = S + bias, the bias a
// non-virtual [1|b, 1|h, s_q, s_kv] io tensor that cuDNN broadcasts; ALiBi
// as S = S + d * slope (slopes f32 [1|b, h, 1, 1]) with d from the GEN_INDEX
// row and column indices in int32: column - row under the top-left causal
// masks (cudnn-frontend's alibi graph; visible scores have d <= 0), else
// -|column - row - (s_kv - s_q)|. With dbias the backward reduces dS before
// its `* scale` (the gradient of the post-scale scores) over the batch into
// dbias [1, h, s_q, s_kv] (io), and, as cudnn-frontend does with dbias,
// writes dQ = matmul(dS, K) directly, without the dQ accumulator.
//
// thd (packed sequences) is the padded bshd graph with a padding mask whose
// Q, K, V, O, dO, dQ, dK and dV descriptors (and the reshaped K of the dQ
// matmul) carry CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC: an int32 [b + 1, 1,
// 1, 1] tensor of each sequence's first element (cu_seqlens times the
// tensor's token stride; elements, not bytes). Stats, the softmax sum and
// the dQ accumulator keep their padded [b, h, s_q, .] shapes, as
// cudnn-frontend builds them without max_total_seq_len.
//
// kv cache: the thd forward with plain K and V (the bshd caches, packed, no
// ragged offsets; seq_len_kv says how many rows of each are keys), the
// statistics in the workspace (nothing reads them), and the causal mask
// aligned bottom-right per batch entry, in int32 index arithmetic as
// cudnn-frontend's composite diagonal band mask builds it for a right bound
// with sequence-length tensors.
//
// Version workarounds (as cudnn-frontend applies them):
//   * cuDNN < 9.10 wants the lowest finite float as the mask value, later
//     versions -inf;
//   * 9.0 <= cuDNN < 9.10 backward with a padding mask applies it twice;
//   * cuDNN <= 9.15 backward without a padding mask needs one anyway when
//     s_kv % 128 != 0: seq_len tensors filled with s_q and s_kv, kept in
//     the workspace and set with a memset before each run;
//   * cuDNN < 9.6 does not clear the dQ accumulator itself: memset to 0.
//
//===----------------------------------------------------------------------===//
#include "runtime/AttentionGraph.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <array>
#include <limits>
#include <map>
#include <optional>

using namespace tejit::runtime;
using namespace tejit::runtime::attention;

namespace {

using Dims = std::array<int64_t, 4>;

/// Byte alignment told to cuDNN for every tensor (cudnn-frontend's
/// default); the caller's pointers are at least this aligned.
constexpr int64_t tensorAlignment = 16;
/// Alignment of the graph's own buffers in the workspace.
constexpr size_t workspaceAlignment = 256;

Dims rowMajorStrides(const Dims &dims) {
  Dims strides{};
  int64_t stride = 1;
  for (int i = 3; i >= 0; --i) {
    strides[i] = stride;
    stride *= dims[i];
  }
  return strides;
}

/// The last two dimensions swapped: a transposed view of the same bytes.
Dims swapLast(Dims dims) {
  std::swap(dims[2], dims[3]);
  return dims;
}

/// A tensor descriptor of the graph and what it describes.
struct Tensor {
  cudnnBackendDescriptor_t desc = nullptr;
  int64_t uid = 0;
  Dims dims{}, strides{};
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
};

/// Creates the descriptors of one graph. The first failure is kept and
/// every later call does nothing (returning empty tensors), so the graph
/// code reads as a straight list of operations; finish() reports it.
class Builder {
public:
  Builder(const Cudnn &lib, cudnnHandle_t handle) : lib(lib), handle(handle) {}

  size_t version() const { return lib.version; }

  //===--------------------------------------------------------------------===//
  // Tensors
  //===--------------------------------------------------------------------===//

  /// A non-virtual tensor bound to `slot` (`index`: see Binding), with the
  /// per-batch start offsets `ragged` when given.
  Tensor bound(Slot slot, Dims dims, Dims strides, cudnnDataType_t type,
               const char *what, size_t index = 0,
               const Tensor *ragged = nullptr) {
    Tensor tensor = make(dims, strides, type, /*isVirtual=*/false,
                         /*byValue=*/false, what, ragged);
    if (tensor.desc)
      graph.bindings.push_back({tensor.uid, slot, index});
    return tensor;
  }

  /// A buffer of the graph's own at the start of the workspace.
  Tensor workspace(Dims dims, Dims strides, cudnnDataType_t type, size_t bytes,
                   const char *what) {
    size_t offset = graph.workspaceBytes;
    graph.workspaceBytes += llvm::alignTo(bytes, workspaceAlignment);
    return bound(Slot::Workspace, dims, strides, type, what, offset);
  }

  /// A 32-bit memset of a workspace buffer before every run.
  void fill(const Tensor &tensor, size_t count, uint32_t value) {
    for (const Binding &binding : graph.bindings)
      if (binding.uid == tensor.uid && binding.slot == Slot::Workspace)
        graph.fills.push_back({binding.index, count, value});
  }

  /// An f32 by-value scalar [1, 1, 1, 1].
  Tensor scalar(float value, const char *what) {
    return byValue(CUDNN_DATA_FLOAT, llvm::bit_cast<uint32_t>(value), what);
  }

  /// An int32 by-value scalar [1, 1, 1, 1].
  Tensor scalarInt32(int32_t value, const char *what) {
    return byValue(CUDNN_DATA_INT32, llvm::bit_cast<uint32_t>(value), what);
  }

  Tensor virtualTensor(Dims dims, Dims strides, cudnnDataType_t type,
                       const char *what) {
    return make(dims, strides, type, /*isVirtual=*/true, /*byValue=*/false,
                what);
  }

  //===--------------------------------------------------------------------===//
  // Operations
  //===--------------------------------------------------------------------===//

  /// y = mode(x [, b [, t]]) into an existing y; GEN_INDEX takes `axis`.
  void pointwiseInto(cudnnPointwiseMode_t mode, const Tensor &x,
                     const Tensor *b, const Tensor *t, const Tensor &y,
                     const char *what, cudnnDataType_t math = CUDNN_DATA_FLOAT,
                     std::optional<int64_t> axis = std::nullopt) {
    cudnnBackendDescriptor_t pw =
        create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, what);
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode,
        what);
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math,
        what);
    if (axis)
      set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &*axis, what);
    finalize(pw, what);

    cudnnBackendDescriptor_t op =
        create(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, what);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw, what);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x.desc, what);
    if (b)
      setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b->desc, what);
    if (t)
      setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t->desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y.desc, what);
    float one = 1.0f;
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one,
        what);
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one,
        what);
    finishOperation(op, what);
  }

  /// A unary pointwise into a new virtual tensor shaped like x.
  Tensor unary(cudnnPointwiseMode_t mode, const Tensor &x, const char *what,
               cudnnDataType_t outType = CUDNN_DATA_FLOAT,
               cudnnDataType_t math = CUDNN_DATA_FLOAT,
               std::optional<int64_t> axis = std::nullopt) {
    Tensor y = virtualTensor(x.dims, x.strides, outType, what);
    pointwiseInto(mode, x, nullptr, nullptr, y, what, math, axis);
    return y;
  }

  /// A binary pointwise into a new virtual tensor of the broadcast shape,
  /// with the strides of the input of that shape (row-major if none).
  Tensor binary(cudnnPointwiseMode_t mode, const Tensor &x, const Tensor &b,
                const char *what, cudnnDataType_t outType = CUDNN_DATA_FLOAT,
                cudnnDataType_t math = CUDNN_DATA_FLOAT) {
    Dims dims{};
    for (int i = 0; i < 4; ++i)
      dims[i] = std::max(x.dims[i], b.dims[i]);
    Dims strides = dims == x.dims   ? x.strides
                   : dims == b.dims ? b.strides
                                    : rowMajorStrides(dims);
    Tensor y = virtualTensor(dims, strides, outType, what);
    pointwiseInto(mode, x, &b, nullptr, y, what, math);
    return y;
  }

  /// y = mask ? x : fill, shaped like x.
  Tensor select(const Tensor &x, const Tensor &fill, const Tensor &mask,
                const char *what) {
    Tensor y = virtualTensor(x.dims, x.strides, CUDNN_DATA_FLOAT, what);
    pointwiseInto(CUDNN_POINTWISE_BINARY_SELECT, x, &fill, &mask, y, what);
    return y;
  }

  /// y = reduce(x) over the dimensions where y's size differs from x's.
  void reduceInto(cudnnReduceTensorOp_t mode, const Tensor &x, const Tensor &y,
                  const char *what) {
    cudnnBackendDescriptor_t red =
        create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, what);
    cudnnDataType_t math = CUDNN_DATA_FLOAT;
    set(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
        1, &mode, what);
    set(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math,
        what);
    finalize(red, what);
    cudnnBackendDescriptor_t op =
        create(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, what);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x.desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y.desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, red, what);
    finishOperation(op, what);
  }

  Tensor reduce(cudnnReduceTensorOp_t mode, const Tensor &x, Dims dims,
                const char *what) {
    Tensor y =
        virtualTensor(dims, rowMajorStrides(dims), CUDNN_DATA_FLOAT, what);
    reduceInto(mode, x, y, what);
    return y;
  }

  /// c = a b (batched over the first two dimensions, f32 accumulation);
  /// the overrides are the per-batch sizes of padded problems.
  void matmul(const Tensor &a, const Tensor &b, const Tensor &c,
              const Tensor *mOverride, const Tensor *nOverride,
              const Tensor *kOverride, const char *what) {
    cudnnBackendDescriptor_t mm = create(CUDNN_BACKEND_MATMUL_DESCRIPTOR, what);
    cudnnDataType_t math = CUDNN_DATA_FLOAT;
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &math, what);
    finalize(mm, what);
    cudnnBackendDescriptor_t op =
        create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, what);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a.desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b.desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c.desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm, what);
    if (mOverride)
      setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC,
              mOverride->desc, what);
    if (nOverride)
      setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC,
              nOverride->desc, what);
    if (kOverride)
      setDesc(op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC,
              kOverride->desc, what);
    finishOperation(op, what);
  }

  /// The same elements viewed with other dimensions and strides (and x's
  /// ragged offsets, which the view must repeat).
  Tensor reshape(const Tensor &x, Dims dims, Dims strides, cudnnDataType_t type,
                 const char *what, const Tensor *ragged = nullptr) {
    Tensor y = make(dims, strides, type, /*isVirtual=*/true,
                    /*byValue=*/false, what, ragged);
    cudnnBackendDescriptor_t op =
        create(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, what);
    setDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x.desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y.desc, what);
    finishOperation(op, what);
    return y;
  }

  /// y (virtual) = the rows of `container`'s pages that `pageTable` lists
  /// for each sequence, up to its `seqLen` (cuDNN 9.5's paged cache load).
  void pagedCacheLoad(const Tensor &container, const Tensor &seqLen,
                      const Tensor &pageTable, const Tensor &y,
                      const char *what) {
    cudnnBackendDescriptor_t op =
        create(CUDNN_BACKEND_OPERATION_PAGED_CACHE_LOAD_DESCRIPTOR, what);
    setDesc(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_CONTAINER_DESC,
            container.desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_PAGE_TABLE_DESC,
            pageTable.desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_SEQUENCE_DESC,
            seqLen.desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_PAGED_CACHE_LOAD_YDESC, y.desc, what);
    finishOperation(op, what);
  }

  /// Philox Bernoulli samples (1 with probability `keep`) of shape `dims`,
  /// from device seed and offset tensors.
  Tensor rng(const Tensor &seed, const Tensor &offset, double keep, Dims dims,
             const char *what) {
    Tensor y =
        virtualTensor(dims, rowMajorStrides(dims), CUDNN_DATA_FLOAT, what);
    cudnnBackendDescriptor_t desc = create(CUDNN_BACKEND_RNG_DESCRIPTOR, what);
    cudnnRngDistribution_t distribution = CUDNN_RNG_DISTRIBUTION_BERNOULLI;
    set(desc, CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_TYPE_RNG_DISTRIBUTION, 1,
        &distribution, what);
    set(desc, CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, CUDNN_TYPE_DOUBLE, 1,
        &keep, what);
    finalize(desc, what);
    cudnnBackendDescriptor_t op =
        create(CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR, what);
    setDesc(op, CUDNN_ATTR_OPERATION_RNG_YDESC, y.desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_RNG_SEED, seed.desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, offset.desc, what);
    setDesc(op, CUDNN_ATTR_OPERATION_RNG_DESC, desc, what);
    finishOperation(op, what);
    return y;
  }

  void note(const std::string &text) {
    graph.notes += (graph.notes.empty() ? "" : "; ") + text;
  }

  /// The finalized operation graph, or the first failure.
  llvm::Expected<Graph> finish(const AttentionProblem &problem) {
    const char *what = "operation graph";
    cudnnBackendDescriptor_t desc = nullptr;
    if (failure.empty()) {
      auto created = BackendDescriptor::create(
          lib, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, what);
      if (!created)
        return annotate(created.takeError(), context(problem));
      graph.operationGraph = std::move(*created);
      desc = graph.operationGraph.get();
    }
    // The handle attribute is deprecated in recent headers but required
    // by the older cuDNN 9 releases tejit supports. (No handle: only the
    // graph's structure is checked, as the CPU-only tests do.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    if (handle)
      set(desc, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle,
          what);
#pragma GCC diagnostic pop
    set(desc, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        static_cast<int64_t>(operations.size()), operations.data(), what);
    finalize(desc, what);
    if (!failure.empty()) {
      bool unsupported =
          CUDNN_STATUS_CATEGORY(failureStatus) == CUDNN_STATUS_NOT_SUPPORTED;
      return makeError(unsupported ? ErrorCode::Unsupported
                                   : ErrorCode::Internal,
                       context(problem) + ": " + failure);
    }
    return std::move(graph);
  }

private:
  std::string context(const AttentionProblem &problem) const {
    return llvm::formatv("building the cuDNN {0} graph for {1}",
                         lib.versionString(), problem.key())
        .str();
  }

  /// A by-value scalar of `type` whose 4 bytes are `bits`.
  Tensor byValue(cudnnDataType_t type, uint32_t bits, const char *what) {
    Tensor tensor = make({1, 1, 1, 1}, {1, 1, 1, 1}, type,
                         /*isVirtual=*/false, /*byValue=*/true, what);
    if (tensor.desc) {
      graph.bindings.push_back(
          {tensor.uid, Slot::Host, graph.hostScalars.size()});
      graph.hostScalars.push_back(bits);
    }
    return tensor;
  }

  Tensor make(Dims dims, Dims strides, cudnnDataType_t type, bool isVirtual,
              bool byValue, const char *what, const Tensor *ragged = nullptr) {
    Tensor tensor;
    tensor.uid = nextUid++;
    tensor.dims = dims;
    tensor.strides = strides;
    tensor.type = type;
    cudnnBackendDescriptor_t desc =
        create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, what);
    set(desc, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &tensor.uid,
        what);
    set(desc, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type,
        what);
    set(desc, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data(),
        what);
    set(desc, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data(),
        what);
    set(desc, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1,
        &tensorAlignment, what);
    if (isVirtual)
      set(desc, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &isVirtual,
          what);
    if (byValue)
      set(desc, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byValue,
          what);
    if (ragged)
      setDesc(desc, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, ragged->desc, what);
    finalize(desc, what);
    if (failure.empty())
      tensor.desc = desc;
    return tensor;
  }

  /// A new descriptor owned by the graph; null once something failed.
  cudnnBackendDescriptor_t create(cudnnBackendDescriptorType_t type,
                                  const char *what) {
    if (!failure.empty())
      return nullptr;
    cudnnBackendDescriptor_t desc = nullptr;
    cudnnStatus_t status = lib.cudnnBackendCreateDescriptor(type, &desc);
    if (status != CUDNN_STATUS_SUCCESS) {
      fail(status, llvm::formatv("creating a descriptor for {0}", what));
      return nullptr;
    }
    // Owned at once, so that it is destroyed whatever happens next.
    graph.descriptors.push_back(BackendDescriptor::adopt(lib, desc));
    return desc;
  }

  void set(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, int64_t count, const void *values,
           const char *what) {
    if (!failure.empty() || !desc)
      return;
    cudnnStatus_t status =
        lib.cudnnBackendSetAttribute(desc, name, type, count, values);
    if (status != CUDNN_STATUS_SUCCESS)
      fail(status, llvm::formatv("setting attribute {0} of {1}",
                                 static_cast<int>(name), what));
  }

  void setDesc(cudnnBackendDescriptor_t desc, cudnnBackendAttributeName_t name,
               cudnnBackendDescriptor_t value, const char *what) {
    set(desc, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value, what);
  }

  void finalize(cudnnBackendDescriptor_t desc, const char *what) {
    if (!failure.empty() || !desc)
      return;
    cudnnStatus_t status = lib.cudnnBackendFinalize(desc);
    if (status != CUDNN_STATUS_SUCCESS)
      fail(status, llvm::formatv("finalizing {0}", what));
  }

  void finishOperation(cudnnBackendDescriptor_t op, const char *what) {
    finalize(op, what);
    if (failure.empty())
      operations.push_back(op);
  }

  void fail(cudnnStatus_t status, const std::string &what) {
    std::string last = lib.lastErrorString();
    failure = what + ": " + lib.statusText(status) +
              (last.empty() ? "" : ": " + last);
    failureStatus = status;
  }

  const Cudnn &lib;
  cudnnHandle_t handle;
  Graph graph;
  std::vector<cudnnBackendDescriptor_t> operations;
  int64_t nextUid = 1;
  std::string failure;
  cudnnStatus_t failureStatus = CUDNN_STATUS_SUCCESS;
};

//===----------------------------------------------------------------------===//
// The attention graphs
//===----------------------------------------------------------------------===//

cudnnDataType_t ioType(ElementType element) {
  switch (element) {
  case ElementType::F16:
    return CUDNN_DATA_HALF;
  case ElementType::F8E4M3:
    return CUDNN_DATA_FP8_E4M3;
  case ElementType::F8E5M2:
    return CUDNN_DATA_FP8_E5M2;
  default:
    return CUDNN_DATA_BFLOAT16;
  }
}

/// [b, h, s, d] dimensions and strides of a tensor with `heads` heads and
/// `seq` positions in the problem's layout, `token` elements apart from one
/// token to the next (0: packed, heads * d), in a buffer of `rows` positions
/// per batch entry (the bshd batch stride). thd is viewed as bshd: its
/// ragged offsets replace the batch stride.
std::pair<Dims, Dims> view(const AttentionProblem &p, int64_t heads,
                           int64_t seq, int64_t rows, int64_t token = 0) {
  int64_t b = p.batch, d = p.headDim;
  if (token == 0)
    token = heads * d;
  Dims dims = {b, heads, seq, d};
  if (p.layout == AttentionLayout::Sbhd) // [s, b, h, d]
    return {dims, {token, d, b * token, 1}};
  return {dims, {rows * token, d, token, 1}}; // [b, s, h, d]
}

/// The pieces the forward and backward graphs share.
struct Common {
  const AttentionProblem &p;
  cudnnDataType_t io;
  /// Dimensions, and strides of packed tensors (o, dO).
  Dims q, qStrides, kv, kvStrides;
  Dims scores, rows; // [b, h, s_q, s_kv], [b, h, s_q, 1]
  /// The stats' strides: packed, or rowsQ() rows per (b, h).
  Dims statsStrides;
  std::optional<Tensor> seqLenQ, seqLenKv;
  std::optional<Tensor> seed, offset;
  /// thd: the ragged offset tensors made so far, by slot.
  std::map<Slot, Tensor> raggedOffsets;
  /// The value masked scores get.
  float maskValue;

  Common(Builder &g, const AttentionProblem &p) : p(p), io(ioType(p.element)) {
    std::tie(q, qStrides) = view(p, p.heads, p.seqQ, p.rowsQ());
    std::tie(kv, kvStrides) = view(p, p.kvHeads, p.seqKv, p.rowsKv());
    scores = {p.batch, p.heads, p.seqQ, p.seqKv};
    rows = {p.batch, p.heads, p.seqQ, 1};
    int64_t statsRows = p.rowsQ();
    statsStrides = {p.heads * statsRows, statsRows, 1, 1};
    maskValue = g.version() < 91000 ? std::numeric_limits<float>::lowest()
                                    : -std::numeric_limits<float>::infinity();
    if (p.dropout > 0) {
      seed = g.bound(Slot::Seed, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT64,
                     "dropout seed");
      offset = g.bound(Slot::Offset, {1, 1, 1, 1}, {1, 1, 1, 1},
                       CUDNN_DATA_INT64, "dropout offset");
    }
  }

  /// Strides of q-shaped and k/v-shaped operands `token` elements apart
  /// from one token to the next (0: packed).
  Dims qStridesOf(int64_t token) const {
    return view(p, p.heads, p.seqQ, p.rowsQ(), token).second;
  }
  Dims kvStridesOf(int64_t token) const {
    return view(p, p.kvHeads, p.seqKv, p.rowsKv(), token).second;
  }

  void bindSeqLens(Builder &g) {
    seqLenQ = g.bound(Slot::SeqLenQ, {p.batch, 1, 1, 1}, {1, 1, 1, 1},
                      CUDNN_DATA_INT32, "seq_len_q");
    seqLenKv = g.bound(Slot::SeqLenKv, {p.batch, 1, 1, 1}, {1, 1, 1, 1},
                       CUDNN_DATA_INT32, "seq_len_kv");
  }

  /// thd: the int32 [b + 1, 1, 1, 1] ragged offsets bound to `slot` (made on
  /// first use); null for the padded layouts.
  const Tensor *ragged(Builder &g, Slot slot) {
    if (!p.thd())
      return nullptr;
    auto [entry, made] = raggedOffsets.try_emplace(slot);
    if (made)
      entry->second = g.bound(slot, {p.batch + 1, 1, 1, 1}, {1, 1, 1, 1},
                              CUDNN_DATA_INT32, "ragged offsets");
    return &entry->second;
  }

  /// A paged kv cache's K^T [b, h_kv, d, s_kv] and V [b, h_kv, s_kv, d]
  /// (virtual), loaded from the page pools [pages, page_size, h_kv, d]
  /// (cuDNN's container dims [pages, h_kv, page_size, d]) through the page
  /// table [b, 1, s_kv / page_size, 1], as cudnn-frontend's paged sdpa does.
  std::pair<Tensor, Tensor> pagedKeysValues(Builder &g) const {
    int64_t b = p.batch, kvHeads = p.kvHeads, d = p.headDim, s = p.seqKv,
            ps = p.pageSize, width = p.pagesPerSequence();
    Dims pool = {p.pages, kvHeads, ps, d},
         poolStrides = {ps * kvHeads * d, d, kvHeads * d, 1};
    Tensor kPool = g.bound(Slot::K, pool, poolStrides, io, "k pages");
    Tensor vPool = g.bound(Slot::V, pool, poolStrides, io, "v pages");
    Tensor table =
        g.bound(Slot::PageTable, {b, 1, width, 1}, {width, width, 1, 1},
                CUDNN_DATA_INT32, "page table");
    Tensor kT =
        g.virtualTensor({b, kvHeads, d, s}, {kvHeads * d * s, d * s, 1, d}, io,
                        "k (transposed, from pages)");
    Tensor v =
        g.virtualTensor({b, kvHeads, s, d}, {kvHeads * s * d, s * d, d, 1}, io,
                        "v (from pages)");
    g.pagedCacheLoad(kPool, *seqLenKv, table, kT, "paged k load");
    g.pagedCacheLoad(vPool, *seqLenKv, table, v, "paged v load");
    return {kT, v};
  }

  const Tensor *seqQ() const { return seqLenQ ? &*seqLenQ : nullptr; }
  const Tensor *seqKv() const { return seqLenKv ? &*seqLenKv : nullptr; }

  /// The row and column index of every score, as (`out`, `math`) typed
  /// GEN_INDEX results: each mask keeps the types cuDNN's engines expect of
  /// it (cudnn-frontend's).
  static std::pair<Tensor, Tensor>
  indices(Builder &g, const Tensor &s, const char *rowWhat, const char *colWhat,
          cudnnDataType_t out, cudnnDataType_t math) {
    return {g.unary(CUDNN_POINTWISE_GEN_INDEX, s, rowWhat, out, math, 2),
            g.unary(CUDNN_POINTWISE_GEN_INDEX, s, colWhat, out, math, 3)};
  }

  /// Scores of padded rows and columns become the mask value.
  Tensor padding(Builder &g, const Tensor &s) const {
    auto [row, col] = indices(g, s, "padding row index", "padding column index",
                              CUDNN_DATA_INT32, CUDNN_DATA_INT32);
    Tensor rowIn =
        g.binary(CUDNN_POINTWISE_CMP_LT, row, *seqLenQ, "row < seq_len_q",
                 CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
    Tensor colIn =
        g.binary(CUDNN_POINTWISE_CMP_LT, col, *seqLenKv, "column < seq_len_kv",
                 CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
    Tensor keep =
        g.binary(CUDNN_POINTWISE_LOGICAL_AND, rowIn, colIn, "padding mask",
                 CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
    return g.select(s, g.scalar(maskValue, "padding mask value"), keep,
                    "padding select");
  }

  /// Scores above the diagonal (column > row) become the mask value.
  Tensor causal(Builder &g, const Tensor &s) const {
    auto [row, col] = indices(g, s, "causal row index", "causal column index",
                              CUDNN_DATA_INT32, CUDNN_DATA_FLOAT);
    Tensor keep = g.binary(CUDNN_POINTWISE_CMP_GE, row, col, "row >= column",
                           CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
    return g.select(s, g.scalar(maskValue, "causal mask value"), keep,
                    "causal select");
  }

  /// Scores right of each batch entry's bottom-right-aligned diagonal
  /// become the mask value: keep row + seq_len_kv - seq_len_q >= column,
  /// the shift added to the row index in int32 (the length tensors
  /// broadcast along the column axis), then compared with the column index.
  /// Without padding (CausalBottomRight) the lengths are s_q and s_kv, as
  /// int32 by-value scalars, in cudnn-frontend's form of that mask.
  Tensor causalBottomRight(Builder &g, const Tensor &s) const {
    auto [row, col] = indices(g, s, "bottom-right causal row index",
                              "bottom-right causal column index",
                              CUDNN_DATA_INT32, CUDNN_DATA_FLOAT);
    bool padded = p.padding();
    Tensor keys =
        padded ? *seqLenKv : g.scalarInt32(int32_t(p.seqKv), "s_kv (scalar)");
    Tensor queries =
        padded ? *seqLenQ : g.scalarInt32(int32_t(p.seqQ), "s_q (scalar)");
    Tensor plusKv = g.virtualTensor(row.dims, row.strides, CUDNN_DATA_INT32,
                                    "row + seq_len_kv");
    g.pointwiseInto(CUDNN_POINTWISE_ADD, row, &keys, nullptr, plusKv,
                    "row + seq_len_kv", CUDNN_DATA_INT32, 3);
    Tensor diagonal = g.virtualTensor(row.dims, row.strides, CUDNN_DATA_INT32,
                                      "row + seq_len_kv - seq_len_q");
    g.pointwiseInto(CUDNN_POINTWISE_SUB, plusKv, &queries, nullptr, diagonal,
                    "row + seq_len_kv - seq_len_q", CUDNN_DATA_INT32, 3);
    Tensor keep = g.binary(CUDNN_POINTWISE_CMP_GE, diagonal, col,
                           "row + seq_len_kv - seq_len_q >= column",
                           CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
    return g.select(s, g.scalar(maskValue, "bottom-right causal mask value"),
                    keep, "bottom-right causal select");
  }

  /// Scores left of the band (column < row - left) become the mask value,
  /// in the form cuDNN's sliding-window engines recognize:
  /// keep column + (left + 1) > row.
  Tensor leftBound(Builder &g, const Tensor &s, int64_t left) const {
    auto [row, col] = indices(g, s, "window row index", "window column index",
                              CUDNN_DATA_FLOAT, CUDNN_DATA_FLOAT);
    Tensor length =
        g.scalar(static_cast<float>(left + 1), "window length (left + 1)");
    Tensor reach = g.virtualTensor(col.dims, col.strides, CUDNN_DATA_FLOAT,
                                   "column + left + 1");
    g.pointwiseInto(CUDNN_POINTWISE_ADD, col, &length, nullptr, reach,
                    "column + left + 1", CUDNN_DATA_FLOAT, 3);
    Tensor keep =
        g.binary(CUDNN_POINTWISE_CMP_GT, reach, row, "column + left + 1 > row",
                 CUDNN_DATA_BOOLEAN, CUDNN_DATA_BOOLEAN);
    return g.select(s, g.scalar(maskValue, "window left mask value"), keep,
                    "window left select");
  }

  /// The causal mask and the sliding window, in cudnn-frontend's order:
  /// the right bound (the causal diagonal, either alignment; validate()
  /// refuses others), then the left bound.
  Tensor band(Builder &g, const Tensor &s) const {
    Tensor result = s;
    if (p.bottomRight())
      result = causalBottomRight(g, result);
    else if (p.causal())
      result = causal(g, result);
    if (p.windowLeft >= 0)
      result = leftBound(g, result, p.windowLeft);
    return result;
  }

  /// The post-scale bias or ALiBi added to the scaled scores where
  /// cudnn-frontend adds them: after the scale, before the masks.
  Tensor addBias(Builder &g, const Tensor &s) const {
    if (p.bias == AttentionBias::Alibi)
      return alibi(g, s);
    if (p.bias != AttentionBias::PostScale)
      return s;
    // Packed strides, as Transformer Engine describes its bias: cuDNN
    // broadcasts the dims of size 1.
    Dims dims = {p.biasBatch, p.biasHeads, p.seqQ, p.seqKv};
    Tensor bias = g.bound(Slot::Bias, dims, rowMajorStrides(dims), io, "bias");
    return g.binary(CUDNN_POINTWISE_ADD, s, bias, "scores + bias");
  }

  /// ALiBi from the score indices: s + d * slope with d = column - row
  /// under a top-left causal mask, where every visible score has d <= 0
  /// (cudnn-frontend's alibi graph: int32 indices, one MUL by the f32
  /// slopes, one ADD), else d = -|column - row - off|, still int32.
  Tensor alibi(Builder &g, const Tensor &s) const {
    auto [row, col] = indices(g, s, "alibi row index", "alibi column index",
                              CUDNN_DATA_INT32, CUDNN_DATA_INT32);
    Tensor distance = g.binary(CUDNN_POINTWISE_SUB, col, row, "column - row",
                               CUDNN_DATA_INT32, CUDNN_DATA_INT32);
    // Top-left, every visible score has column <= row: no ABS needed.
    if (!p.alibiTopLeft()) {
      if (int64_t offset = p.alibiOffset())
        distance = g.binary(
            CUDNN_POINTWISE_SUB, distance,
            g.scalarInt32(static_cast<int32_t>(offset), "alibi offset"),
            "column - row - offset", CUDNN_DATA_INT32, CUDNN_DATA_INT32);
      distance = g.unary(CUDNN_POINTWISE_ABS, distance, "|distance|",
                         CUDNN_DATA_INT32, CUDNN_DATA_INT32);
      distance = g.unary(CUDNN_POINTWISE_NEG, distance, "-|distance|",
                         CUDNN_DATA_INT32, CUDNN_DATA_INT32);
    }
    Dims dims = {p.alibiSlopes == AlibiSlopes::BatchHeads ? p.batch : 1,
                 p.heads, 1, 1};
    Tensor slopes = g.bound(Slot::AlibiSlopes, dims, rowMajorStrides(dims),
                            CUDNN_DATA_FLOAT, "alibi slopes");
    Tensor penalty =
        g.binary(CUDNN_POINTWISE_MUL, distance, slopes, "distance * slope");
    return g.binary(CUDNN_POINTWISE_ADD, s, penalty, "scores + alibi");
  }

  /// q k^T times the softmax scale (f32 [b, h, s_q, s_kv]); `what` names
  /// the matmul.
  Tensor scaledScores(Builder &g, const Tensor &q, const Tensor &kT,
                      const char *what) const {
    Tensor s = g.virtualTensor(scores, rowMajorStrides(scores),
                               CUDNN_DATA_FLOAT, "q k^T");
    g.matmul(q, kT, s, seqQ(), seqKv(), nullptr, what);
    return g.binary(
        CUDNN_POINTWISE_MUL, s,
        g.scalar(static_cast<float>(p.softmaxScale), "softmax scale"),
        "scale scores");
  }

  /// The forward's softmax of the masked scores `s` in flash form: writes
  /// the statistics max + log(sum) into `stats` and returns (exp(s - max),
  /// sum), whose quotient is P.
  std::pair<Tensor, Tensor> softmaxWithStats(Builder &g, const Tensor &s,
                                             const Tensor &stats) const {
    Tensor max = g.reduce(CUDNN_REDUCE_TENSOR_MAX, s, rows, "row max");
    Tensor shifted = g.binary(CUDNN_POINTWISE_SUB, s, max, "scores - max");
    Tensor e = g.unary(CUDNN_POINTWISE_EXP, shifted, "exp");
    Tensor sum = g.reduce(CUDNN_REDUCE_TENSOR_ADD, e, rows, "row sum");
    Tensor logSum = g.unary(CUDNN_POINTWISE_LOG, sum, "log(sum)");
    g.pointwiseInto(CUDNN_POINTWISE_ADD, max, &logSum, nullptr, stats,
                    "stats = max + log(sum)");
    return {e, sum};
  }

  Tensor dropoutMask(Builder &g) const {
    return g.rng(*seed, *offset, 1.0 - p.dropout, scores, "dropout mask");
  }
};

void buildForward(Builder &g, const AttentionProblem &p) {
  Common c(g, p);
  const AttentionProblem::TokenStrides &t = p.tokenStrides;
  Tensor q = g.bound(Slot::Q, c.q, c.qStridesOf(t.q), c.io, "q", 0,
                     c.ragged(g, Slot::RaggedQ));
  // A kv cache's K and V are the packed bshd caches; the token strides are
  // those of the new tokens the prep kernel appends.
  bool cache = p.kvCache;
  Dims kStrides = cache ? c.kvStrides : c.kvStridesOf(t.k);
  Dims vStrides = cache ? c.kvStrides : c.kvStridesOf(t.v);
  if (p.padding())
    c.bindSeqLens(g);
  // cuDNN takes K^T [b, h_kv, d, s_kv]: the same bytes, last two swapped.
  // Paged caches are gathered into them through the page table.
  auto [kT, v] =
      p.paged()
          ? c.pagedKeysValues(g)
          : std::pair{g.bound(Slot::K, swapLast(c.kv), swapLast(kStrides), c.io,
                              "k (transposed)", 0,
                              cache ? nullptr : c.ragged(g, Slot::RaggedK)),
                      g.bound(Slot::V, c.kv, vStrides, c.io, "v", 0,
                              cache ? nullptr : c.ragged(g, Slot::RaggedV))};

  Tensor s = c.scaledScores(g, q, kT, "bmm1 q k^T");
  s = c.addBias(g, s);
  if (p.padding())
    s = c.padding(g, s);
  s = c.band(g, s);

  // Softmax with its statistics. Inference (the kv cache) has no backward
  // to read them; the graph keeps writing them, in the workspace, so that
  // it keeps the shape the engines recognize.
  Tensor stats =
      cache ? g.workspace(c.rows, rowMajorStrides(c.rows), CUDNN_DATA_FLOAT,
                          size_t(p.batch * p.heads * p.seqQ) * sizeof(float),
                          "stats (unused)")
            : g.bound(Slot::Stats, c.rows, c.statsStrides, CUDNN_DATA_FLOAT,
                      "stats");
  auto [e, sum] = c.softmaxWithStats(g, s, stats);

  // bmm2 reads P in the input type: the last pointwise before it writes it.
  Tensor prob;
  if (p.dropout > 0) {
    prob = g.binary(CUDNN_POINTWISE_DIV, e, sum, "softmax");
    prob = g.binary(CUDNN_POINTWISE_MUL, prob, c.dropoutMask(g),
                    "apply dropout mask");
    prob = g.binary(
        CUDNN_POINTWISE_MUL, prob,
        g.scalar(static_cast<float>(1.0 / (1.0 - p.dropout)), "dropout scale"),
        "dropout scale", c.io);
  } else {
    prob = g.binary(CUDNN_POINTWISE_DIV, e, sum, "softmax", c.io);
  }
  Tensor o = g.bound(Slot::O, c.q, c.qStrides, c.io, "o", 0,
                     c.ragged(g, Slot::RaggedO));
  g.matmul(prob, v, o, c.seqQ(), nullptr, c.seqKv(), "bmm2 p v");
}

void buildBackward(Builder &g, const AttentionProblem &p) {
  Common c(g, p);
  int64_t b = p.batch, h = p.heads, sq = p.seqQ, skv = p.seqKv, d = p.headDim;
  const AttentionProblem::TokenStrides &t = p.tokenStrides;
  Tensor q = g.bound(Slot::Q, c.q, c.qStridesOf(t.q), c.io, "q", 0,
                     c.ragged(g, Slot::RaggedQ));
  Tensor kT = g.bound(Slot::K, swapLast(c.kv), swapLast(c.kvStridesOf(t.k)),
                      c.io, "k (transposed)", 0, c.ragged(g, Slot::RaggedK));
  Tensor vT = g.bound(Slot::V, swapLast(c.kv), swapLast(c.kvStridesOf(t.v)),
                      c.io, "v (transposed)", 0, c.ragged(g, Slot::RaggedV));
  // o and dO are both packed [t, h, d]: one set of offsets serves both.
  Tensor o = g.bound(Slot::O, c.q, c.qStrides, c.io, "o", 0,
                     c.ragged(g, Slot::RaggedO));
  Tensor gradO = g.bound(Slot::GradO, c.q, c.qStrides, c.io, "dO", 0,
                         c.ragged(g, Slot::RaggedO));
  // Stats stay [b, h, s_q, 1], padded per sequence, even for thd.
  Tensor stats =
      g.bound(Slot::Stats, c.rows, c.statsStrides, CUDNN_DATA_FLOAT, "stats");
  Tensor gradQ = g.bound(Slot::GradQ, c.q, c.qStridesOf(t.gradQ), c.io, "dQ", 0,
                         c.ragged(g, Slot::RaggedGradQ));
  Tensor gradK = g.bound(Slot::GradK, c.kv, c.kvStridesOf(t.gradK), c.io, "dK",
                         0, c.ragged(g, Slot::RaggedGradK));
  Tensor gradV = g.bound(Slot::GradV, c.kv, c.kvStridesOf(t.gradV), c.io, "dV",
                         0, c.ragged(g, Slot::RaggedGradV));

  bool padding = p.padding();
  if (padding) {
    c.bindSeqLens(g);
  } else if (skv % 128 != 0 && g.version() <= 91500) {
    // The backward engines of these versions need the padding pattern for
    // such lengths: full lengths, filled in the workspace before each run.
    padding = true;
    c.seqLenQ = g.workspace({b, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32,
                            b * sizeof(int32_t), "seq_len_q (full)");
    c.seqLenKv = g.workspace({b, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_INT32,
                             b * sizeof(int32_t), "seq_len_kv (full)");
    g.fill(*c.seqLenQ, b, static_cast<uint32_t>(sq));
    g.fill(*c.seqLenKv, b, static_cast<uint32_t>(skv));
    g.note("full-length padding mask (s_kv % 128 != 0)");
  }

  std::optional<Tensor> mask;
  if (p.dropout > 0)
    mask = c.dropoutMask(g);

  // D = rowsum(dO * O) * (1 - p): kept in the workspace.
  Tensor gradOO = g.virtualTensor({b, h, sq, d}, {h * sq * d, sq * d, h * d, 1},
                                  CUDNN_DATA_FLOAT, "dO * o");
  g.pointwiseInto(CUDNN_POINTWISE_MUL, gradO, &o, nullptr, gradOO, "dO * o");
  Tensor rowDot =
      g.reduce(CUDNN_REDUCE_TENSOR_ADD, gradOO, c.rows, "rowsum(dO * o)");
  Tensor softmaxSum =
      g.workspace(c.rows, rowMajorStrides(c.rows), CUDNN_DATA_FLOAT,
                  b * h * sq * sizeof(float), "softmax sum");
  float keep = static_cast<float>(1.0 - p.dropout);
  Tensor keepScalar =
      g.scalar(p.dropout > 0 ? keep : 1.0f, "dropout scale inverse");
  g.pointwiseInto(CUDNN_POINTWISE_MUL, rowDot, &keepScalar, nullptr, softmaxSum,
                  "softmax sum * (1 - p)");

  // Recompute the probabilities from the stats.
  Tensor s = g.virtualTensor(c.scores, rowMajorStrides(c.scores),
                             CUDNN_DATA_FLOAT, "q k^T");
  g.matmul(q, kT, s, c.seqQ(), c.seqKv(), nullptr, "q k^T");
  Tensor scale = g.scalar(static_cast<float>(p.softmaxScale), "softmax scale");
  s = g.binary(CUDNN_POINTWISE_MUL, s, scale, "scale scores");
  s = c.addBias(g, s);
  s = g.binary(CUDNN_POINTWISE_SUB, s, stats, "scores - stats");
  if (padding) {
    s = c.padding(g, s);
    if (g.version() >= 90000 && g.version() < 91000) {
      s = c.padding(g, s);
      g.note("padding mask applied twice (cuDNN < 9.10)");
    }
  }
  s = c.band(g, s);
  Tensor e = g.unary(CUDNN_POINTWISE_EXP, s, "exp");
  Tensor prob = e;
  std::optional<Tensor> dropoutScale;
  if (mask) {
    dropoutScale =
        g.scalar(static_cast<float>(1.0 / (1.0 - p.dropout)), "dropout scale");
    prob = g.binary(CUDNN_POINTWISE_MUL, prob, *mask, "apply dropout mask");
    prob = g.binary(CUDNN_POINTWISE_MUL, prob, *dropoutScale, "dropout scale");
  }

  Dims transposedScores = {b, h, skv, sq};
  Dims transposedStrides = {h * sq * skv, sq * skv, 1, skv};
  bool grouped = p.kvHeads != p.heads;
  Dims fullHead = {b, h, skv, d};

  // dK and dV: `lhs` [b, h, s_kv, s_q] times `rhs` [b, h, s_q, d] into
  // `out`; with GQA/MQA, over all query heads first, then summed over each
  // group of heads that shares a kv head.
  auto kvGradient = [&](const Tensor &lhs, const Tensor &rhs, const Tensor &out,
                        const char *what, const char *allHeads,
                        const char *groups) {
    if (!grouped) {
      g.matmul(lhs, rhs, out, c.seqKv(), nullptr, c.seqQ(), what);
      return;
    }
    Tensor full =
        g.virtualTensor(fullHead, rowMajorStrides(fullHead), c.io, allHeads);
    g.matmul(lhs, rhs, full, c.seqKv(), nullptr, c.seqQ(), what);
    g.reduceInto(CUDNN_REDUCE_TENSOR_ADD, full, out, groups);
  };

  // dV = P^T dO.
  Tensor probT =
      g.reshape(prob, transposedScores, transposedStrides, c.io, "p^T");
  kvGradient(probT, gradO, gradV, "p^T dO", "dV (all heads)", "dV head groups");

  // dS = (dP [* mask] - D) * E [* 1/(1-p)] * scale.
  Tensor gradP = g.virtualTensor(c.scores, rowMajorStrides(c.scores),
                                 CUDNN_DATA_FLOAT, "dO v^T");
  g.matmul(gradO, vT, gradP, c.seqQ(), c.seqKv(), nullptr, "dO v^T");
  if (mask)
    gradP = g.binary(CUDNN_POINTWISE_MUL, gradP, *mask, "dP * dropout mask");
  Tensor gradS =
      g.binary(CUDNN_POINTWISE_SUB, gradP, softmaxSum, "dP - softmax sum");
  gradS = g.binary(CUDNN_POINTWISE_MUL, gradS, e, "(dP - D) * exp");
  if (dropoutScale)
    gradS =
        g.binary(CUDNN_POINTWISE_MUL, gradS, *dropoutScale, "dS dropout scale");
  // dS so far is the gradient of the post-scale scores, the bias's.
  if (p.biasGrad) {
    Dims dims = {1, h, sq, skv};
    Tensor gradBias =
        g.bound(Slot::GradBias, dims, rowMajorStrides(dims), c.io, "dbias");
    g.reduceInto(CUDNN_REDUCE_TENSOR_ADD, gradS, gradBias,
                 "dbias = dS summed over the batch");
  }
  gradS = g.binary(CUDNN_POINTWISE_MUL, gradS, scale, "dS softmax scale");

  // dK = dS^T Q.
  Tensor gradST =
      g.reshape(gradS, transposedScores, transposedStrides, c.io, "dS^T");
  kvGradient(gradST, q, gradK, "dS^T q", "dK (all heads)", "dK head groups");

  // dQ = dS K, accumulated in f32 in the workspace, then converted.
  Tensor k = g.reshape(kT, c.kv, c.kvStridesOf(t.k), CUDNN_DATA_FLOAT, "k",
                       c.ragged(g, Slot::RaggedK));
  // With dbias, cudnn-frontend takes the engines' dP-workspace form: dQ
  // straight from the matmul, no accumulator of the graph's own.
  if (p.biasGrad) {
    g.matmul(gradS, k, gradQ, c.seqQ(), nullptr, c.seqKv(), "dS k");
    return;
  }
  Dims qDims = {b, h, sq, d};
  Tensor accum = g.workspace(qDims, rowMajorStrides(qDims), CUDNN_DATA_FLOAT,
                             b * h * sq * d * sizeof(float), "dQ accumulator");
  if (g.version() < 90600) {
    g.fill(accum, b * h * sq * d, 0);
    g.note("dQ accumulator cleared before each run (cuDNN < 9.6)");
  }
  g.matmul(gradS, k, accum, c.seqQ(), nullptr, c.seqKv(), "dS k");
  g.pointwiseInto(CUDNN_POINTWISE_IDENTITY, accum, nullptr, nullptr, gradQ,
                  "dQ from the accumulator");
}

//===----------------------------------------------------------------------===//
// FP8 attention (docs/fp8-attention.md)
//===----------------------------------------------------------------------===//

/// One f32 [1, 1, 1, 1] device scalar of the FP8 graphs (a meta slot).
Tensor scaleTensor(Builder &g, Slot slot, const char *what) {
  return g.bound(slot, {1, 1, 1, 1}, {1, 1, 1, 1}, CUDNN_DATA_FLOAT, what);
}

/// P's cast to E4M3: kProbabilityScale and its inverse, device constants
/// of the runner's (fp8Constants).
std::pair<Tensor, Tensor> probabilityScales(Builder &g) {
  return {scaleTensor(g, Slot::ProbabilityScale, "scale s (fixed)"),
          scaleTensor(g, Slot::ProbabilityDescale, "descale s (fixed)")};
}

/// An FP8 matmul as cudnn-frontend's matmul_fp8 node lowers it: the f32
/// product (GQA: over all query heads, then summed over each group of
/// heads), times the two descales, written to `out` times `scaleOut`, and
/// the amax of the descaled product (before that scale) into `amax`.
void fp8Matmul(Builder &g, const Tensor &a, const Tensor &b, const Tensor &out,
               const Tensor &descaleA, const Tensor &descaleB,
               const Tensor &scaleOut, const Tensor &amax, const Tensor *m,
               const Tensor *k, const char *what) {
  Dims dims = {a.dims[0], a.dims[1], a.dims[2], b.dims[3]};
  Tensor product =
      g.virtualTensor(dims, rowMajorStrides(dims), CUDNN_DATA_FLOAT, what);
  g.matmul(a, b, product, m, nullptr, k, what);
  if (dims[1] != out.dims[1]) {
    Dims grouped = out.dims;
    Tensor sum = g.virtualTensor(grouped, rowMajorStrides(grouped),
                                 CUDNN_DATA_FLOAT, "head groups");
    g.reduceInto(CUDNN_REDUCE_TENSOR_ADD, product, sum, "head groups");
    product = sum;
  }
  product = g.binary(CUDNN_POINTWISE_MUL, product, descaleA, "descale a");
  product = g.binary(CUDNN_POINTWISE_MUL, product, descaleB, "descale b");
  g.pointwiseInto(CUDNN_POINTWISE_MUL, product, &scaleOut, nullptr, out,
                  "scale the output");
  g.reduceInto(CUDNN_REDUCE_TENSOR_AMAX, product, amax, "output amax");
}

/// Forward, in cudnn-frontend's sdpa_fp8 order: S = q k^T * scale *
/// descale_q * descale_k, masked; softmax with its statistics; amax_s;
/// P * scale_s cast to FP8; o = fp8 matmul(P, v). No dropout (validate()
/// says why).
void buildForwardFp8(Builder &g, const AttentionProblem &p) {
  Common c(g, p);
  const AttentionProblem::TokenStrides &t = p.tokenStrides;
  Tensor q = g.bound(Slot::Q, c.q, c.qStridesOf(t.q), c.io, "q");
  Tensor kT = g.bound(Slot::K, swapLast(c.kv), swapLast(c.kvStridesOf(t.k)),
                      c.io, "k (transposed)");
  Tensor v = g.bound(Slot::V, c.kv, c.kvStridesOf(t.v), c.io, "v");
  Tensor descaleQ = scaleTensor(g, Slot::DescaleQkv, "descale q");
  Tensor descaleK = scaleTensor(g, Slot::DescaleQkv, "descale k");
  Tensor descaleV = scaleTensor(g, Slot::DescaleQkv, "descale v");
  auto [scaleS, descaleS] = probabilityScales(g);
  Tensor scaleO = scaleTensor(g, Slot::ScaleO, "scale o");
  Tensor amaxS = scaleTensor(g, Slot::AmaxS, "amax s");
  Tensor amaxO = scaleTensor(g, Slot::AmaxO, "amax o");
  if (p.padding())
    c.bindSeqLens(g);

  Tensor s = c.scaledScores(g, q, kT, "bmm1 q k^T");
  s = g.binary(CUDNN_POINTWISE_MUL, s, descaleQ, "descale q");
  s = g.binary(CUDNN_POINTWISE_MUL, s, descaleK, "descale k");
  if (p.padding())
    s = c.padding(g, s);
  s = c.band(g, s);

  Tensor stats =
      g.bound(Slot::Stats, c.rows, c.statsStrides, CUDNN_DATA_FLOAT, "stats");
  auto [e, sum] = c.softmaxWithStats(g, s, stats);
  Tensor prob = g.binary(CUDNN_POINTWISE_DIV, e, sum, "softmax");
  g.reduceInto(CUDNN_REDUCE_TENSOR_AMAX, prob, amaxS, "amax s");
  // bmm2 reads P in FP8: the scale's pointwise writes it.
  prob = g.binary(CUDNN_POINTWISE_MUL, prob, scaleS, "scale s", c.io);
  Tensor o = g.bound(Slot::O, c.q, c.qStrides, c.io, "o");
  fp8Matmul(g, prob, v, o, descaleS, descaleV, scaleO, amaxO, c.seqQ(),
            c.seqKv(), "bmm2 p v");
}

/// Backward, in cudnn-frontend's sdpa_fp8_backward order (see the file
/// comment's bf16 backward for the math): D from dO * o and their descales;
/// P recomputed and cast with scale_s; dV = fp8 matmul(P^T, dO); dS from
/// dO v^T, scaled by the softmax scale, its amax, cast with scale_dp; dQ =
/// fp8 matmul(dS, k), dK = fp8 matmul(dS^T, q).
void buildBackwardFp8(Builder &g, const AttentionProblem &p) {
  Common c(g, p);
  int64_t b = p.batch, h = p.heads, sq = p.seqQ, skv = p.seqKv, d = p.headDim;
  const AttentionProblem::TokenStrides &t = p.tokenStrides;
  cudnnDataType_t gradType = ioType(p.gradElement);
  Tensor q = g.bound(Slot::Q, c.q, c.qStridesOf(t.q), c.io, "q");
  Tensor kT = g.bound(Slot::K, swapLast(c.kv), swapLast(c.kvStridesOf(t.k)),
                      c.io, "k (transposed)");
  Tensor vT = g.bound(Slot::V, swapLast(c.kv), swapLast(c.kvStridesOf(t.v)),
                      c.io, "v (transposed)");
  Tensor o = g.bound(Slot::O, c.q, c.qStrides, c.io, "o");
  Tensor gradO = g.bound(Slot::GradO, c.q, c.qStrides, gradType, "dO");
  Tensor stats =
      g.bound(Slot::Stats, c.rows, c.statsStrides, CUDNN_DATA_FLOAT, "stats");
  Tensor gradQ =
      g.bound(Slot::GradQ, c.q, c.qStridesOf(t.gradQ), gradType, "dQ");
  Tensor gradK =
      g.bound(Slot::GradK, c.kv, c.kvStridesOf(t.gradK), gradType, "dK");
  Tensor gradV =
      g.bound(Slot::GradV, c.kv, c.kvStridesOf(t.gradV), gradType, "dV");
  Tensor descaleQ = scaleTensor(g, Slot::DescaleQkv, "descale q");
  Tensor descaleK = scaleTensor(g, Slot::DescaleQkv, "descale k");
  Tensor descaleV = scaleTensor(g, Slot::DescaleQkv, "descale v");
  Tensor descaleO = scaleTensor(g, Slot::DescaleO, "descale o");
  Tensor descaleGradO = scaleTensor(g, Slot::DescaleGradO, "descale dO");
  auto [scaleS, descaleS] = probabilityScales(g);
  Tensor descaleDp = scaleTensor(g, Slot::DescaleDp, "descale dP");
  Tensor scaleDp = scaleTensor(g, Slot::ScaleDp, "scale dP");
  Tensor scaleGradQ = scaleTensor(g, Slot::ScaleGradQkv, "scale dQ");
  Tensor scaleGradK = scaleTensor(g, Slot::ScaleGradQkv, "scale dK");
  Tensor scaleGradV = scaleTensor(g, Slot::ScaleGradQkv, "scale dV");
  Tensor amaxDp = scaleTensor(g, Slot::AmaxDp, "amax dP");
  Tensor amaxGradQ = scaleTensor(g, Slot::AmaxGradQ, "amax dQ");
  Tensor amaxGradK = scaleTensor(g, Slot::AmaxGradK, "amax dK");
  Tensor amaxGradV = scaleTensor(g, Slot::AmaxGradV, "amax dV");
  if (p.padding())
    c.bindSeqLens(g);

  // D = rowsum(dO * o) * descale_dO * descale_o.
  Tensor gradOO = g.virtualTensor({b, h, sq, d}, {h * sq * d, sq * d, h * d, 1},
                                  CUDNN_DATA_FLOAT, "dO * o");
  g.pointwiseInto(CUDNN_POINTWISE_MUL, gradO, &o, nullptr, gradOO, "dO * o");
  Tensor softmaxSum =
      g.reduce(CUDNN_REDUCE_TENSOR_ADD, gradOO, c.rows, "rowsum(dO * o)");
  softmaxSum =
      g.binary(CUDNN_POINTWISE_MUL, softmaxSum, descaleGradO, "descale dO");
  softmaxSum = g.binary(CUDNN_POINTWISE_MUL, softmaxSum, descaleO, "descale o");

  // P, recomputed from the statistics.
  Tensor s = g.virtualTensor(c.scores, rowMajorStrides(c.scores),
                             CUDNN_DATA_FLOAT, "q k^T");
  g.matmul(q, kT, s, c.seqQ(), c.seqKv(), nullptr, "q k^T");
  Tensor scale = g.scalar(static_cast<float>(p.softmaxScale), "softmax scale");
  s = g.binary(CUDNN_POINTWISE_MUL, s, scale, "scale scores");
  s = g.binary(CUDNN_POINTWISE_MUL, s, descaleQ, "descale q");
  s = g.binary(CUDNN_POINTWISE_MUL, s, descaleK, "descale k");
  if (p.padding())
    s = c.padding(g, s);
  s = c.band(g, s);
  s = g.binary(CUDNN_POINTWISE_SUB, s, stats, "scores - stats");
  Tensor e = g.unary(CUDNN_POINTWISE_EXP, s, "exp");
  Tensor prob = g.binary(CUDNN_POINTWISE_MUL, e, scaleS, "scale s", c.io);

  Dims transposedScores = {b, h, skv, sq};
  Dims transposedStrides = {h * sq * skv, sq * skv, 1, skv};
  Tensor probT =
      g.reshape(prob, transposedScores, transposedStrides, c.io, "p^T");
  fp8Matmul(g, probT, gradO, gradV, descaleS, descaleGradO, scaleGradV,
            amaxGradV, c.seqKv(), c.seqQ(), "p^T dO");

  // dS = (dO v^T * descales - D) * E * scale.
  Tensor gradP = g.virtualTensor(c.scores, rowMajorStrides(c.scores),
                                 CUDNN_DATA_FLOAT, "dO v^T");
  g.matmul(gradO, vT, gradP, c.seqQ(), c.seqKv(), nullptr, "dO v^T");
  gradP = g.binary(CUDNN_POINTWISE_MUL, gradP, descaleGradO, "descale dO");
  gradP = g.binary(CUDNN_POINTWISE_MUL, gradP, descaleV, "descale v");
  Tensor gradS =
      g.binary(CUDNN_POINTWISE_SUB, gradP, softmaxSum, "dP - softmax sum");
  gradS = g.binary(CUDNN_POINTWISE_MUL, gradS, e, "(dP - D) * exp");
  gradS = g.binary(CUDNN_POINTWISE_MUL, gradS, scale, "dS softmax scale");
  g.reduceInto(CUDNN_REDUCE_TENSOR_AMAX, gradS, amaxDp, "amax dP");
  gradS = g.binary(CUDNN_POINTWISE_MUL, gradS, scaleDp, "scale dP", gradType);

  // dQ = dS k, dK = dS^T q.
  Tensor k = g.reshape(kT, c.kv, c.kvStridesOf(t.k), c.io, "k");
  fp8Matmul(g, gradS, k, gradQ, descaleDp, descaleK, scaleGradQ, amaxGradQ,
            c.seqQ(), c.seqKv(), "dS k");
  Tensor gradST =
      g.reshape(gradS, transposedScores, transposedStrides, gradType, "dS^T");
  fp8Matmul(g, gradST, q, gradK, descaleDp, descaleQ, scaleGradK, amaxGradK,
            c.seqKv(), c.seqQ(), "dS^T q");
}

} // namespace

namespace {
/// The device constants of an FP8 runner and their values, in buffer
/// order, 16 bytes apart.
constexpr std::pair<Slot, float> fp8ConstantValues[] = {
    {Slot::ProbabilityScale, kProbabilityScale},
    {Slot::ProbabilityDescale, 1.0f / kProbabilityScale}};
constexpr size_t fp8ConstantStride = 16 / sizeof(float);
} // namespace

std::vector<float> attention::fp8Constants() {
  std::vector<float> values(std::size(fp8ConstantValues) * fp8ConstantStride,
                            0.0f);
  for (auto [index, constant] : llvm::enumerate(fp8ConstantValues))
    values[index * fp8ConstantStride] = constant.second;
  return values;
}

size_t attention::fp8ConstantOffset(Slot slot) {
  for (auto [index, constant] : llvm::enumerate(fp8ConstantValues))
    if (constant.first == slot)
      return index * fp8ConstantStride * sizeof(float);
  llvm_unreachable("not an FP8 attention constant");
}

llvm::Expected<Graph> attention::buildGraph(const Cudnn &lib,
                                            cudnnHandle_t handle,
                                            const AttentionProblem &problem) {
  Builder builder(lib, handle);
  if (problem.fp8 && problem.backward)
    buildBackwardFp8(builder, problem);
  else if (problem.fp8)
    buildForwardFp8(builder, problem);
  else if (problem.backward)
    buildBackward(builder, problem);
  else
    buildForward(builder, problem);
  return builder.finish(problem);
}
