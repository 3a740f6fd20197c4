//===- TeIrTest.h - a test fixture that parses te IR ------------*- C++ -*-===//
//
// The emitter tests (BlockQuantizeEmitTest, GroupedEmitTest) write te IR as
// text: this fixture holds the context with the te and func dialects
// loaded, and parses a module, failing the test when the text does not
// parse.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_TESTS_CODEGEN_EMIT_TEIRTEST_H
#define TEJIT_TESTS_CODEGEN_EMIT_TEIRTEST_H

#include "dialects/TEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

namespace tejit::testing {

class TeIrTest : public ::testing::Test {
protected:
  void SetUp() override {
    context.loadDialect<mlir::te::TEDialect, mlir::func::FuncDialect>();
  }

  mlir::OwningOpRef<mlir::ModuleOp> parse(llvm::StringRef text) {
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceString<mlir::ModuleOp>(text,
                                                mlir::ParserConfig(&context));
    EXPECT_TRUE(module) << text.str();
    return module;
  }

  mlir::MLIRContext context;
};

} // namespace tejit::testing

#endif // TEJIT_TESTS_CODEGEN_EMIT_TEIRTEST_H
