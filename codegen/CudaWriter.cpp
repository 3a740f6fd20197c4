//===- CudaWriter.cpp - an indented stream for generated CUDA C++ ---------===//
#include "codegen/CudaWriter.h"

#include <cassert>

using namespace tejit::codegen;

CudaWriter &CudaWriter::line(const llvm::Twine &text) {
  std::string content = text.str();
  if (!content.empty())
    os.indent(2 * depth) << content;
  os << "\n";
  return *this;
}

CudaWriter &CudaWriter::open(const llvm::Twine &head) {
  line(head + " {");
  ++depth;
  return *this;
}

CudaWriter &CudaWriter::close(llvm::StringRef tail) {
  assert(depth > 0 && "close without open");
  --depth;
  return line("}" + tail);
}

CudaWriter &CudaWriter::reopen(const llvm::Twine &head) {
  close(" " + head.str() + " {");
  ++depth;
  return *this;
}

CudaWriter &CudaWriter::raw(llvm::StringRef text) {
  os << text;
  return *this;
}
