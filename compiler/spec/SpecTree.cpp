//===- SpecTree.cpp - a layer spec's YAML/JSON document as a small tree
//----===//
#include "compiler/spec/SpecTree.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
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
  TreeBuilder(const SpecLocations &locations, llvm::StringRef buffer)
      : locations(locations), buffer(buffer) {}

  std::unique_ptr<SpecNode> build(llvm::yaml::Node *node) {
    auto result = std::make_unique<SpecNode>();
    result->loc = node->getSourceRange().Start;
    // A node's anchor, alias name and tag point into the buffer, just past
    // their sigil ('&', '*', '!').
    if (!node->getAnchor().empty()) {
      emitError(locations.get(sigilLoc(node->getAnchor())))
          << "YAML anchors and aliases are not supported in layer specs: "
             "write the value out";
      return nullptr;
    }
    if (auto *alias = dyn_cast<llvm::yaml::AliasNode>(node)) {
      emitError(locations.get(sigilLoc(alias->getName())))
          << "YAML aliases and anchors are not supported in layer specs: "
             "write the value out";
      return nullptr;
    }
    if (!node->getRawTag().empty()) {
      emitError(
          locations.get(llvm::SMLoc::getFromPointer(node->getRawTag().data())))
          << "YAML tags are not supported in layer specs";
      return nullptr;
    }
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
      result->loc = flowStart(result->loc);
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
    emitError(locations.get(result->loc)) << "unsupported YAML node";
    return nullptr;
  }

private:
  static llvm::SMLoc sigilLoc(llvm::StringRef name) {
    return llvm::SMLoc::getFromPointer(name.data() - 1);
  }

  /// llvm::yaml starts a flow collection at its first item (or at its
  /// closing bracket when empty); moves `loc` back to the opening bracket.
  llvm::SMLoc flowStart(llvm::SMLoc loc) const {
    const char *start = buffer.begin(), *p = loc.getPointer();
    if (!p || p < start || p > buffer.end())
      return loc;
    while (p > start && llvm::StringRef(" \t\r\n").contains(p[-1]))
      --p;
    if (p > start && (p[-1] == '{' || p[-1] == '['))
      return llvm::SMLoc::getFromPointer(p - 1);
    return loc;
  }

  std::unique_ptr<SpecNode> buildMapping(llvm::yaml::MappingNode *map,
                                         std::unique_ptr<SpecNode> result) {
    result->kind = SpecNode::Kind::Mapping;
    result->loc = flowStart(result->loc);
    llvm::StringSet<> seen;
    for (llvm::yaml::KeyValueNode &entry : *map) {
      auto *key = dyn_cast_or_null<llvm::yaml::ScalarNode>(entry.getKey());
      if (!key) {
        llvm::SMLoc loc = entry.getKey()
                              ? entry.getKey()->getSourceRange().Start
                              : entry.getSourceRange().Start;
        emitError(locations.get(flowStart(loc)))
            << "mapping keys must be plain strings";
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
      // llvm::yaml places a missing value (`key:`) at the next token, which
      // may be lines below; the key is where the user looks.
      if (isa<llvm::yaml::NullNode>(value))
        child->loc = keyLoc;
      result->entries.push_back({name, keyLoc, std::move(child)});
    }
    return result;
  }

  const SpecLocations &locations;
  llvm::StringRef buffer;
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
  // ParseError prints "[line:col, byte=N]: message". The parser reports
  // most errors after reading the offending character, so N is one past it;
  // only the end of the buffer and text after the document are reported
  // where they start.
  llvm::SmallVector<llvm::StringRef> groups;
  llvm::SMLoc loc = llvm::SMLoc::getFromPointer(buffer.getBufferStart());
  if (llvm::Regex("byte=([0-9]+)\\]: (.*)").match(message, &groups)) {
    size_t offset = 0;
    if (!groups[1].getAsInteger(10, offset) &&
        offset <= buffer.getBufferSize()) {
      if (offset > 0 && offset < buffer.getBufferSize() &&
          groups[2] != "Text after end of document")
        --offset;
      loc = llvm::SMLoc::getFromPointer(buffer.getBufferStart() + offset);
    }
    message = groups[2].str();
  }
  return emitError(locations.get(loc)) << "invalid JSON: " << message;
}

FailureOr<std::unique_ptr<SpecNode>>
tejit::spec::parseSpecTree(llvm::SourceMgr &sourceMgr,
                           const SpecLocations &locations) {
  const llvm::MemoryBuffer &buffer =
      *sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
  if (llvm::sys::path::extension(buffer.getBufferIdentifier())
          .equals_insensitive(".json") &&
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
  llvm::yaml::Node *rootNode = document->getRoot();
  if (!forwarder.failed && isa_and_nonnull<llvm::yaml::NullNode>(rootNode))
    return emitError(locations.get(
               llvm::SMLoc::getFromPointer(buffer.getBufferStart())))
           << "the layer spec is empty";
  if (rootNode)
    root = TreeBuilder(locations, buffer.getBuffer()).build(rootNode);
  if (!forwarder.failed && root && ++document != stream.end()) {
    // Point at the second document's content when it has some.
    llvm::yaml::Node *second = document->getRoot();
    llvm::SMLoc loc = root->loc;
    if (second && !isa<llvm::yaml::NullNode>(second))
      loc = second->getSourceRange().Start;
    if (!forwarder.failed)
      emitError(locations.get(loc))
          << "a layer spec holds one YAML document, this is a second one";
    root = nullptr;
  }
  if (forwarder.failed || !root)
    return failure();
  return std::move(root);
}
