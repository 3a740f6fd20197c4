//===- Cudnn.h - cuDNN's backend API, loaded on first use -------*- C++ -*-===//
//
// tejit never links cuDNN: like cuBLASLt it is dlopen'ed the first time a
// program needs it (fused attention), so every binary still starts on a
// machine without it. cudnn_graph.h is included for its types and enums
// only; the entry points keep its names and types and are resolved with
// dlsym.
//
// Errors: a missing or unusable library is ErrorCode::Unsupported (the
// feature cannot run in this process), a failing call ErrorCode::Internal;
// both messages carry cuDNN's own last error string.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_CUDNN_H
#define TEJIT_RUNTIME_CUDNN_H

#include "runtime/Errors.h"

#include <cudnn_graph.h>

#include <string>

namespace tejit::runtime {

/// The cuDNN entry points we use. Each member is a pointer to the function
/// cudnn_graph.h declares under that name.
struct Cudnn {
#define TEJIT_CUDNN_FUNCTIONS(X)                                               \
  X(cudnnGetVersion)                                                           \
  X(cudnnGetErrorString)                                                       \
  X(cudnnGetLastErrorString)                                                   \
  X(cudnnCreate)                                                               \
  X(cudnnDestroy)                                                              \
  X(cudnnSetStream)                                                            \
  X(cudnnBackendCreateDescriptor)                                              \
  X(cudnnBackendDestroyDescriptor)                                             \
  X(cudnnBackendFinalize)                                                      \
  X(cudnnBackendSetAttribute)                                                  \
  X(cudnnBackendGetAttribute)                                                  \
  X(cudnnBackendExecute)
#define TEJIT_DECLARE(fn) decltype(&::fn) fn = nullptr;
  TEJIT_CUDNN_FUNCTIONS(TEJIT_DECLARE)
#undef TEJIT_DECLARE

  /// The file the library was loaded from.
  std::string path;
  /// cudnnGetVersion(): major * 10000 + minor * 100 + patch (cuDNN 9).
  size_t version = 0;

  /// The loaded library, or why it cannot be used (ErrorCode::Unsupported):
  /// no libcudnn.so.9 or libcudnn.so the dynamic loader can find, or one
  /// older than 9.0 or lacking an entry point. Loaded once per process,
  /// never unloaded.
  static llvm::Expected<const Cudnn &> get();

  /// "9.10.2".
  std::string versionString() const;
  /// cuDNN's message for the last failing call on this thread (it clears
  /// it), "" when there is none.
  std::string lastErrorString() const;
  /// "CUDNN_STATUS_NOT_SUPPORTED (status 3000)".
  std::string statusText(cudnnStatus_t status) const;
  /// An error: "<what>: <statusText>[: <lastErrorString>]".
  llvm::Error error(cudnnStatus_t status, const llvm::Twine &what,
                    ErrorCode code = ErrorCode::Internal) const;
  /// Success, or error(status, what).
  llvm::Error check(cudnnStatus_t status, const llvm::Twine &what) const {
    if (status == CUDNN_STATUS_SUCCESS)
      return llvm::Error::success();
    return error(status, what);
  }
};

/// An owned cudnnBackendDescriptor_t, destroyed with the object.
class BackendDescriptor {
public:
  BackendDescriptor() = default;
  BackendDescriptor(BackendDescriptor &&other) noexcept
      : lib(other.lib), descriptor(other.descriptor) {
    other.descriptor = nullptr;
  }
  BackendDescriptor &operator=(BackendDescriptor &&other) noexcept {
    std::swap(lib, other.lib);
    std::swap(descriptor, other.descriptor);
    return *this;
  }
  BackendDescriptor(const BackendDescriptor &) = delete;
  BackendDescriptor &operator=(const BackendDescriptor &) = delete;
  ~BackendDescriptor() {
    if (descriptor)
      lib->cudnnBackendDestroyDescriptor(descriptor);
  }

  /// A new descriptor of `type`; `what` names it in the error.
  static llvm::Expected<BackendDescriptor>
  create(const Cudnn &lib, cudnnBackendDescriptorType_t type,
         const llvm::Twine &what) {
    BackendDescriptor result;
    result.lib = &lib;
    if (llvm::Error error = lib.check(
            lib.cudnnBackendCreateDescriptor(type, &result.descriptor),
            "cudnnBackendCreateDescriptor(" + what + ")"))
      return std::move(error);
    return std::move(result);
  }

  /// Takes ownership of `descriptor`, made with lib's functions.
  static BackendDescriptor adopt(const Cudnn &lib,
                                 cudnnBackendDescriptor_t descriptor) {
    BackendDescriptor result;
    result.lib = &lib;
    result.descriptor = descriptor;
    return result;
  }

  cudnnBackendDescriptor_t get() const { return descriptor; }
  explicit operator bool() const { return descriptor != nullptr; }

private:
  const Cudnn *lib = nullptr;
  cudnnBackendDescriptor_t descriptor = nullptr;
};

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_CUDNN_H
