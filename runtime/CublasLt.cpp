//===- CublasLt.cpp - cuBLASLt, loaded on first use -----------------------===//
//
// Mirrors CudaDriver.cpp: one load per process, kept in a function-local
// static (whose initialization C++ makes thread-safe), the library never
// dlclose'd: cuBLASLt keeps per-device state and may keep threads until the
// process exits, and runners created on other threads share it.
//
//===----------------------------------------------------------------------===//
#include "runtime/CublasLt.h"
#include "runtime/GemmTuning.h"
#include "runtime/LibraryLoading.h"

#include "llvm/Support/FormatVariadic.h"

using namespace tejit::runtime;

namespace {
/// Major 13 first, the ABI tejit is built against; the unversioned name (a
/// toolkit's development link, or a pip wheel's) covers other releases with
/// the same C API.
const char *const libraryNames[] = {"libcublasLt.so.13", "libcublasLt.so"};

/// cuBLASLt 12.0 has every attribute and epilogue used here (FP8 scales,
/// amax_D, aux data types, fast accumulation) with the values cublasLt.h 13
/// gives them.
constexpr VersionedLibrary cublasLt = {
    libraryNames, "cuBLASLt", "cuBLASLt", 120000, {10000, 100}};

struct LoadResult {
  CublasLt lib;
  /// Empty when the library is usable.
  std::string failure;
};

LoadResult load() {
  LoadResult result;
  LoadedLibrary loaded = openFirstUsable(
      cublasLt, result.lib, [](SymbolResolver &symbols, CublasLt &lib) {
#define TEJIT_RESOLVE(fn) symbols.resolve(lib.fn, #fn);
        TEJIT_CUBLASLT_FUNCTIONS(TEJIT_RESOLVE)
#undef TEJIT_RESOLVE
        return lib.cublasLtGetVersion;
      });
  if (!loaded.handle)
    result.failure =
        llvm::formatv("cuBLASLt could not be loaded; it runs tejit's GEMMs. "
                      "Tried:{0}\nInstall the CUDA 13 cuBLAS libraries (the "
                      "toolkit's lib64, or the nvidia-cublas wheel) where "
                      "the dynamic loader finds them (e.g. LD_LIBRARY_PATH)",
                      loaded.triedText())
            .str();
  return result;
}
} // namespace

llvm::Expected<const CublasLt &> CublasLt::get() {
  static LoadResult loaded = load();
  if (!loaded.failure.empty())
    return makeError(ErrorCode::Cublas, loaded.failure);
  return loaded.lib;
}

std::string CublasLt::versionString() const {
  return cublasLt.versionText(version);
}

std::string CublasLt::statusText(cublasStatus_t status) const {
  const char *name = cublasLtGetStatusName(status);
  const char *text = cublasLtGetStatusString(status);
  return llvm::formatv("{0} (status {1}: {2})", name ? name : "cuBLAS error",
                       static_cast<int>(status), text ? text : "no description")
      .str();
}

llvm::Error CublasLt::error(cublasStatus_t status,
                            const llvm::Twine &what) const {
  return makeError(ErrorCode::Cublas, what + ": " + statusText(status));
}

namespace {
/// AlgoConfig's fields with their cuBLASLt attributes and value types.
template <typename Config, typename Visit>
void forEachAttribute(Config &config, Visit visit) {
  visit(CUBLASLT_ALGO_CONFIG_TILE_ID, uint32_t(), config.tile, "TILE_ID");
  visit(CUBLASLT_ALGO_CONFIG_STAGES_ID, uint32_t(), config.stages, "STAGES_ID");
  visit(CUBLASLT_ALGO_CONFIG_SPLITK_NUM, int32_t(), config.splitK,
        "SPLITK_NUM");
  visit(CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, uint32_t(), config.reduction,
        "REDUCTION_SCHEME");
  visit(CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, uint32_t(), config.swizzle,
        "CTA_SWIZZLING");
  visit(CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, uint32_t(), config.custom,
        "CUSTOM_OPTION");
  visit(CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, uint16_t(), config.cluster,
        "CLUSTER_SHAPE_ID");
  visit(CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, uint16_t(), config.inner,
        "INNER_SHAPE_ID");
}
} // namespace

llvm::Expected<AlgoConfig>
CublasLt::configOf(const cublasLtMatmulAlgo_t &algo) const {
  AlgoConfig config;
  llvm::Error failure = llvm::Error::success();
  auto get = [&](cublasLtMatmulAlgoConfigAttributes_t attribute, auto value,
                 int64_t &field, const char *name) {
    if (failure)
      return;
    size_t written = 0;
    failure = check(
        cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value,
                                             sizeof(value), &written),
        llvm::Twine("cublasLtMatmulAlgoConfigGetAttribute(") + name + ")");
    field = int64_t(value);
  };
  get(CUBLASLT_ALGO_CONFIG_ID, int32_t(), config.id, "ID");
  forEachAttribute(config, get);
  if (failure)
    return std::move(failure);
  return config;
}

llvm::Expected<cublasLtMatmulAlgo_t>
CublasLt::algoOf(cublasLtHandle_t handle, const AlgoConfig &config,
                 cudaDataType_t a, cudaDataType_t b, cudaDataType_t c,
                 cudaDataType_t d) const {
  cublasLtMatmulAlgo_t algo{};
  if (llvm::Error error =
          check(cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F,
                                       a, b, c, d, int(config.id), &algo),
                llvm::formatv("cublasLtMatmulAlgoInit(algo {0})", config.id)))
    return std::move(error);
  llvm::Error failure = llvm::Error::success();
  auto set = [&](cublasLtMatmulAlgoConfigAttributes_t attribute, auto value,
                 int64_t field, const char *name) {
    if (failure)
      return;
    value = decltype(value)(field);
    failure = check(cublasLtMatmulAlgoConfigSetAttribute(&algo, attribute,
                                                         &value, sizeof(value)),
                    llvm::Twine("cublasLtMatmulAlgoConfigSetAttribute(") +
                        name + ")");
  };
  forEachAttribute(config, set);
  if (failure)
    return std::move(failure);
  return algo;
}
