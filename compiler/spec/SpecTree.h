//===- SpecTree.h - a spec's YAML/JSON as a tree ----------------*- C++ -*-===//
//
// llvm::yaml's nodes can be walked only once, in order; the importer wants to
// look keys up by name and report unknown ones afterwards, so the document is
// first copied into this tree, which keeps every node's source location.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_COMPILER_SPEC_SPECTREE_H
#define TEJIT_COMPILER_SPEC_SPECTREE_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/Support/SMLoc.h"
#include "llvm/Support/SourceMgr.h"

#include <memory>
#include <string>
#include <vector>

namespace tejit::spec {

struct SpecNode;

/// One `key: value` entry of a mapping.
struct SpecEntry {
  std::string key;
  llvm::SMLoc keyLoc;
  std::unique_ptr<SpecNode> value;
};

/// A scalar, mapping or list of a spec document.
struct SpecNode {
  enum class Kind { Scalar, Mapping, List };
  Kind kind = Kind::Scalar;
  llvm::SMLoc loc;
  /// Scalar text, unquoted; `quoted` tells a JSON/YAML string from a bare
  /// word or number.
  std::string text;
  bool quoted = false;
  std::vector<SpecEntry> entries;
  std::vector<std::unique_ptr<SpecNode>> items;

  bool isNull() const {
    return kind == Kind::Scalar && !quoted &&
           (text.empty() || text == "null" || text == "~");
  }
  /// A human name for the node's kind, for "expected X, got Y" messages.
  llvm::StringRef describe() const;
};

/// Maps source positions of the spec buffer to MLIR locations.
class SpecLocations {
public:
  SpecLocations(llvm::SourceMgr &sourceMgr, mlir::MLIRContext *context);
  mlir::Location get(llvm::SMLoc loc) const;
  mlir::MLIRContext *getContext() const { return context; }

private:
  llvm::SourceMgr &sourceMgr;
  mlir::MLIRContext *context;
  mlir::StringAttr fileName;
};

/// Parses the main buffer of `sourceMgr` (YAML, or strict JSON when the
/// buffer's name ends in .json) into a tree. Syntax errors, duplicate keys,
/// non-scalar keys and YAML aliases are reported as MLIR diagnostics.
mlir::FailureOr<std::unique_ptr<SpecNode>>
parseSpecTree(llvm::SourceMgr &sourceMgr, const SpecLocations &locations);

} // namespace tejit::spec

#endif // TEJIT_COMPILER_SPEC_SPECTREE_H
