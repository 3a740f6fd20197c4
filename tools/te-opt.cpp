//===- te-opt.cpp - parse, verify, transform and print te IR
//---------------===//
#include "compiler/passes/Passes.h"
#include "dialects/TEDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::te::TEDialect, mlir::func::FuncDialect>();
  // Generic cleanups that are handy on te IR in lit tests.
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  tejit::registerTEPasses();
  return mlir::asMainReturnCode(
      mlir::MlirOptMain(argc, argv, "te dialect optimizer\n", registry));
}
