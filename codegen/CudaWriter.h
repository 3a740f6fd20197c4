//===- CudaWriter.h - an indented stream for generated CUDA C++ -*- C++ -*-===//
#ifndef TEJIT_CODEGEN_CUDAWRITER_H
#define TEJIT_CODEGEN_CUDAWRITER_H

#include "llvm/ADT/Twine.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace tejit::codegen {

/// Writes CUDA C++ a line at a time at the current indentation; `open` and
/// `close` write braces and indent what lies between them.
class CudaWriter {
public:
  /// A writer whose first lines sit `depth` levels in (for code written
  /// apart and spliced into a deeper block).
  explicit CudaWriter(unsigned depth = 0) : depth(depth) {}

  /// Writes `text` on a line of its own (an empty line when empty).
  CudaWriter &line(const llvm::Twine &text = "");
  /// Writes `head {` and indents the following lines.
  CudaWriter &open(const llvm::Twine &head);
  /// Ends the innermost `open` with `}` followed by `tail`.
  CudaWriter &close(llvm::StringRef tail = "");
  /// Ends the innermost `open` and opens the next block on the same line:
  /// `} head {` (an else branch).
  CudaWriter &reopen(const llvm::Twine &head);
  /// Writes `text` as it is (for the embedded device headers).
  CudaWriter &raw(llvm::StringRef text);

  const std::string &str() const { return buffer; }

private:
  std::string buffer;
  llvm::raw_string_ostream os{buffer};
  unsigned depth = 0;
};

} // namespace tejit::codegen

#endif // TEJIT_CODEGEN_CUDAWRITER_H
