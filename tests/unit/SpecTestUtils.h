//===- SpecTestUtils.h - helpers for spec importer tests --------*- C++ -*-===//
//
// Specs are written inline and fed to tejit::importLayerSpec through an
// llvm::SourceMgr whose buffer name (".yaml", ".json") picks the format.
// Diagnostics are captured, not printed, so tests can assert on their text
// and their line:column.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_UNIT_SPECTESTUTILS_H
#define TEJIT_TESTS_UNIT_SPECTESTUTILS_H

#include "compiler/spec/SpecImporter.h"
#include "dialects/TEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include "gtest/gtest.h"

#include <ostream>
#include <string>
#include <vector>

namespace tejit::testing {

/// One captured diagnostic.
struct Diag {
  mlir::DiagnosticSeverity severity;
  std::string file;
  unsigned line = 0, col = 0;
  std::string message;
  /// Attached notes, as "line:col: message".
  std::vector<std::string> notes;
};

inline std::string locString(mlir::Location loc) {
  if (auto fileLoc = llvm::dyn_cast<mlir::FileLineColLoc>(loc))
    return std::to_string(fileLoc.getLine()) + ":" +
           std::to_string(fileLoc.getColumn());
  return "?";
}

inline std::ostream &operator<<(std::ostream &os, const Diag &diag) {
  return os << diag.file << ":" << diag.line << ":" << diag.col << ": "
            << diag.message;
}

/// What importing a spec gave: a module or null, and the diagnostics.
struct ImportResult {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::vector<Diag> diags;

  /// The diagnostics of error severity.
  std::vector<Diag> errors() const {
    std::vector<Diag> result;
    for (const Diag &diag : diags)
      if (diag.severity == mlir::DiagnosticSeverity::Error)
        result.push_back(diag);
    return result;
  }
  /// All diagnostics, one "line:col: message" per line, for failure output.
  std::string describe() const {
    std::string text;
    for (const Diag &diag : diags)
      text += std::to_string(diag.line) + ":" + std::to_string(diag.col) +
              ": " + diag.message + "\n";
    return text.empty() ? "(no diagnostics)" : text;
  }
};

/// Imports `text` as if read from a file named `bufferName`. A leading
/// newline is dropped, so that line 1 of a raw string literal is the line
/// after its opening `R"(`.
inline ImportResult importSpec(mlir::MLIRContext &context, llvm::StringRef text,
                               llvm::StringRef bufferName) {
  text.consume_front("\n");
  ImportResult result;
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, bufferName), llvm::SMLoc());
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    Diag captured;
    captured.severity = diag.getSeverity();
    if (auto loc = llvm::dyn_cast<mlir::FileLineColLoc>(diag.getLocation())) {
      captured.file = loc.getFilename().str();
      captured.line = loc.getLine();
      captured.col = loc.getColumn();
    }
    captured.message = diag.str();
    for (mlir::Diagnostic &note : diag.getNotes())
      captured.notes.push_back(locString(note.getLocation()) + ": " +
                               note.str());
    result.diags.push_back(std::move(captured));
    return mlir::success();
  });
  result.module = importLayerSpec(sourceMgr, &context);
  return result;
}

/// Renders `text` through mlir::SourceMgrDiagnosticHandler, as te-compile
/// prints it: "file:line:col: error: message", the source line and a caret.
inline std::string importSpecRendered(mlir::MLIRContext &context,
                                      llvm::StringRef text,
                                      llvm::StringRef bufferName,
                                      bool *succeeded = nullptr) {
  text.consume_front("\n");
  std::string output;
  llvm::raw_string_ostream os(output);
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(text, bufferName), llvm::SMLoc());
  mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context, os);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      importLayerSpec(sourceMgr, &context);
  if (succeeded)
    *succeeded = static_cast<bool>(module);
  return output;
}

/// Prints a type or attribute as MLIR writes it.
template <typename T> std::string str(T value) {
  std::string text;
  llvm::raw_string_ostream os(text);
  value.print(os);
  return text;
}

inline std::string str(mlir::Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->print(os);
  return text;
}

/// The single function of an imported module.
inline mlir::func::FuncOp getFunction(mlir::ModuleOp module) {
  auto functions = llvm::to_vector(module.getOps<mlir::func::FuncOp>());
  EXPECT_EQ(functions.size(), 1u);
  return functions.empty() ? mlir::func::FuncOp() : functions.front();
}

/// The `te.name` of every argument, in order.
inline std::vector<std::string> argNames(mlir::func::FuncOp function) {
  std::vector<std::string> names;
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    auto name = function.getArgAttrOfType<mlir::StringAttr>(i, "te.name");
    names.push_back(name ? name.str() : "<unnamed>");
  }
  return names;
}

/// The `te.name` of the arguments that carry `te.parameter`.
inline std::vector<std::string> paramNames(mlir::func::FuncOp function) {
  std::vector<std::string> names;
  for (unsigned i = 0; i < function.getNumArguments(); ++i)
    if (function.getArgAttr(i, "te.parameter"))
      names.push_back(
          function.getArgAttrOfType<mlir::StringAttr>(i, "te.name").str());
  return names;
}

/// The `te.name` of every result, in order.
inline std::vector<std::string> resultNames(mlir::func::FuncOp function) {
  std::vector<std::string> names;
  for (unsigned i = 0; i < function.getNumResults(); ++i) {
    auto name = function.getResultAttrOfType<mlir::StringAttr>(i, "te.name");
    names.push_back(name ? name.str() : "<unnamed>");
  }
  return names;
}

/// The argument named `name` (by `te.name`), or null.
inline mlir::BlockArgument argNamed(mlir::func::FuncOp function,
                                    llvm::StringRef name) {
  for (unsigned i = 0; i < function.getNumArguments(); ++i) {
    auto attr = function.getArgAttrOfType<mlir::StringAttr>(i, "te.name");
    if (attr && attr.getValue() == name)
      return function.getArgument(i);
  }
  return nullptr;
}

/// The type of the argument named `name`, printed; "<none>" when absent.
inline std::string argType(mlir::func::FuncOp function, llvm::StringRef name) {
  mlir::BlockArgument arg = argNamed(function, name);
  return arg ? str(arg.getType()) : "<none>";
}

/// Every op of type `OpT` in `function`, in order.
template <typename OpT> std::vector<OpT> opsOf(mlir::func::FuncOp function) {
  std::vector<OpT> ops;
  function.walk([&](OpT op) { ops.push_back(op); });
  return ops;
}

/// The names of the ops in the function body, in order (no terminator).
inline std::vector<std::string> opNames(mlir::func::FuncOp function) {
  std::vector<std::string> names;
  for (mlir::Operation &op : function.front().without_terminator())
    names.push_back(op.getName().getStringRef().str());
  return names;
}

/// A test fixture with an MLIRContext set up as te-compile sets it up.
class SpecTest : public ::testing::Test {
protected:
  SpecTest() { context.printOpOnDiagnostic(false); }

  /// Imports a spec that must succeed and returns its function; records a
  /// test failure (with the diagnostics) otherwise.
  mlir::func::FuncOp importOk(llvm::StringRef text,
                              llvm::StringRef bufferName = "spec.yaml") {
    ImportResult result = importSpec(context, text, bufferName);
    EXPECT_TRUE(result.module) << result.describe();
    EXPECT_TRUE(result.diags.empty()) << result.describe();
    if (!result.module)
      return nullptr;
    modules.push_back(std::move(result.module));
    return getFunction(*modules.back());
  }

  ImportResult import(llvm::StringRef text,
                      llvm::StringRef bufferName = "spec.yaml") {
    return importSpec(context, text, bufferName);
  }

  mlir::MLIRContext context;
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> modules;
};

} // namespace tejit::testing

#endif // TEJIT_TESTS_UNIT_SPECTESTUTILS_H
