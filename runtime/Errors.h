//===- Errors.h - runtime errors that carry a category ----------*- C++ -*-===//
//
// Most failures are plain llvm::StringErrors; the ones a caller must tell
// apart (no GPU, an unsupported GPU, a CUDA or cuBLASLt call failing, a call
// out of order) carry an ErrorCode, which the C API turns into its status.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_ERRORS_H
#define TEJIT_RUNTIME_ERRORS_H

#include "llvm/Support/Error.h"

namespace tejit::runtime {

/// Mirrors tejit_status in include/tejit/tejit.h.
enum class ErrorCode {
  InvalidArgument = 1,
  Compile = 2,
  NoDevice = 3,
  UnsupportedDevice = 4,
  Cuda = 5,
  Cublas = 6,
  Unsupported = 7,
  State = 8,
  Internal = 9,
};

class CodedError : public llvm::ErrorInfo<CodedError> {
public:
  static char ID;
  CodedError(ErrorCode code, std::string message)
      : code(code), message(std::move(message)) {}
  void log(llvm::raw_ostream &os) const override { os << message; }
  std::error_code convertToErrorCode() const override {
    return llvm::inconvertibleErrorCode();
  }
  ErrorCode code;
  std::string message;
};

inline llvm::Error makeError(ErrorCode code, const llvm::Twine &message) {
  return llvm::make_error<CodedError>(code, message.str());
}

/// `error` with "<context>: " before its message, keeping its code (plain
/// errors get `code`).
inline llvm::Error annotate(llvm::Error error, const llvm::Twine &context,
                            ErrorCode code = ErrorCode::Internal) {
  if (!error)
    return error;
  std::string message;
  llvm::handleAllErrors(
      std::move(error),
      [&](const CodedError &coded) {
        code = coded.code;
        message = coded.message;
      },
      [&](const llvm::ErrorInfoBase &other) { message = other.message(); });
  return makeError(code, context + ": " + message);
}

/// The code of `error` (Internal for plain errors), consuming it into
/// `message`.
inline ErrorCode takeError(llvm::Error error, std::string &message,
                           ErrorCode fallback = ErrorCode::Internal) {
  ErrorCode code = fallback;
  message.clear();
  llvm::handleAllErrors(
      std::move(error),
      [&](const CodedError &coded) {
        code = coded.code;
        message += (message.empty() ? "" : "\n") + coded.message;
      },
      [&](const llvm::ErrorInfoBase &other) {
        message += (message.empty() ? "" : "\n") + other.message();
      });
  return code;
}

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_ERRORS_H
