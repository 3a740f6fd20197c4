//===- SpecTree.cpp - a layer spec's YAML/JSON document as a small tree ----===//
#include "compiler/spec/SpecTree.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Regex.h"
#include "llvm/Support/YAMLParser.h"

using namespace mlir;
using namespace tejit::spec;

llvm::StringRef SpecNode::describe() const {
  switch (kind) {
  case Kind::Mapping:
    return "a mapping";
  case Kind::List:
    return "a list";
  case Kind::Scalar:
    return isNull() ? "null" : quoted ? "a string" : "a scalar";
  }
  return "a value";
}

SpecLocations::SpecLocations(llvm::SourceMgr &sourceMgr, MLIRContext *context)
    : sourceMgr(sourceMgr), context(context) {
  const llvm::MemoryBuffer *buffer =
      sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  fileName = StringAttr::get(context, buffer->getBufferIdentifier());
}

Location SpecLocations::get(llvm::SMLoc loc) const {
  if (!loc.isValid())
    return FileLineColLoc::get(fileName, 0, 0);
  auto [line, column] = sourceMgr.getLineAndColumn(loc);
  return FileLineColLoc::get(fileName, line, column);
}

namespace {
/// Copies llvm::yaml nodes into SpecNodes.
class TreeBuilder {
public:
  explicit TreeBuilder(const SpecLocations &locations)
      : locations(locations) {}

  std::unique_ptr<SpecNode> build(llvm::yaml::Node *node) {
    auto result = std::make_unique<SpecNode>();
    result->loc = node->getSourceRange().Start;
    if (auto *scalar = dyn_cast<llvm::yaml::ScalarNode>(node)) {
      llvm::SmallString<32> storage;
      result->text = scalar->getValue(storage).str();
      llvm::StringRef raw = scalar->getRawValue();
      result->quoted = raw.starts_with("\"") || raw.starts_with("'");
      return result;
    }
    if (auto *block = dyn_cast<llvm::yaml::BlockScalarNode>(node)) {
      result->text = block->getValue().str();
      result->quoted = true;
      return result;
    }
    if (isa<llvm::yaml::NullNode>(node))
      return result;
    if (auto *list = dyn_cast<llvm::yaml::SequenceNode>(node)) {
      result->kind = SpecNode::Kind::List;
      for (llvm::yaml::Node &item : *list) {
        std::unique_ptr<SpecNode> child = build(&item);
        if (!child)
          return nullptr;
        result->items.push_back(std::move(child));
      }
      return result;
    }
    if (auto *map = dyn_cast<llvm::yaml::MappingNode>(node))
      return buildMapping(map, std::move(result));
    emitError(locations.get(result->loc))
        << "YAML aliases and anchors are not supported in layer specs";
    return nullptr;
  }

private:
  std::unique_ptr<SpecNode> buildMapping(llvm::yaml::MappingNode *map,
                                         std::unique_ptr<SpecNode> result) {
    result->kind = SpecNode::Kind::Mapping;
    llvm::StringSet<> seen;
    for (llvm::yaml::KeyValueNode &entry : *map) {
      auto *key = dyn_cast_or_null<llvm::yaml::ScalarNode>(entry.getKey());
      if (!key) {
        llvm::SMLoc loc = entry.getKey() ? entry.getKey()->getSourceRange().Start
                                         : entry.getSourceRange().Start;
        emitError(locations.get(loc)) << "mapping keys must be plain strings";
        return nullptr;
      }
      llvm::SmallString<32> storage;
      std::string name = key->getValue(storage).str();
      llvm::SMLoc keyLoc = key->getSourceRange().Start;
      if (!seen.insert(name).second) {
        emitError(locations.get(keyLoc)) << "duplicate key '" << name << "'";
        return nullptr;
      }
      llvm::yaml::Node *value = entry.getValue();
      if (!value)
        return nullptr;
      std::unique_ptr<SpecNode> child = build(value);
      if (!child)
        return nullptr;
      result->entries.push_back({name, keyLoc, std::move(child)});
    }
    return result;
  }

  const SpecLocations &locations;
};

/// Reports llvm::yaml's syntax errors as MLIR diagnostics.
struct YamlDiagnosticForwarder {
  const SpecLocations &locations;
  bool failed = false;

  static void handle(const llvm::SMDiagnostic &diag, void *context) {
    auto *self = static_cast<YamlDiagnosticForwarder *>(context);
    self->failed = true;
    emitError(self->locations.get(diag.getLoc()))
        << "invalid YAML: " << diag.getMessage();
  }
};
} // namespace

/// llvm::yaml accepts more than JSON; a .json spec must be strict JSON.
static LogicalResult checkStrictJson(const llvm::MemoryBuffer &buffer,
                                     const SpecLocations &locations) {
  llvm::Expected<llvm::json::Value> parsed =
      llvm::json::parse(buffer.getBuffer());
  if (parsed)
    return success();
  std::string message = llvm::toString(parsed.takeError());
  // ParseError prints "[line:col, byte=N]: message"; point at that byte.
  llvm::SmallVector<llvm::StringRef> groups;
  llvm::SMLoc loc = llvm::SMLoc::getFromPointer(buffer.getBufferStart());
  if (llvm::Regex("byte=([0-9]+)\\]: (.*)").match(message, &groups)) {
    size_t offset = 0;
    if (!groups[1].getAsInteger(10, offset) &&
        offset <= buffer.getBufferSize())
      loc = llvm::SMLoc::getFromPointer(buffer.getBufferStart() + offset);
    message = groups[2].str();
  }
  return emitError(locations.get(loc)) << "invalid JSON: " << message;
}

FailureOr<std::unique_ptr<SpecNode>>
tejit::spec::parseSpecTree(llvm::SourceMgr &sourceMgr,
                           const SpecLocations &locations) {
  const llvm::MemoryBuffer &buffer =
      *sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  if (buffer.getBufferIdentifier().ends_with(".json") &&
      failed(checkStrictJson(buffer, locations)))
    return failure();

  // The YAML scanner reports through a SourceMgr of its own: the caller's
  // may be printing MLIR diagnostics. Both see the same buffer memory, so
  // locations carry over.
  YamlDiagnosticForwarder forwarder{locations};
  llvm::SourceMgr yamlSourceMgr;
  yamlSourceMgr.setDiagHandler(&YamlDiagnosticForwarder::handle, &forwarder);
  llvm::yaml::Stream stream(buffer.getMemBufferRef(), yamlSourceMgr);
  std::unique_ptr<SpecNode> root;
  llvm::yaml::document_iterator document = stream.begin();
  if (document == stream.end())
    return emitError(locations.get(
               llvm::SMLoc::getFromPointer(buffer.getBufferStart())))
           << "the layer spec is empty";
  if (document->getRoot())
    root = TreeBuilder(locations).build(document->getRoot());
  if (!forwarder.failed && root && ++document != stream.end()) {
    emitError(locations.get(root->loc))
        << "a layer spec holds one YAML document";
    root = nullptr;
  }
  if (forwarder.failed || !root)
    return failure();
  return std::move(root);
}
