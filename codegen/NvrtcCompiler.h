//===- NvrtcCompiler.h - CUDA C++ to cubin/PTX through NVRTC ----*- C++ -*-===//
//
// The NVRTC driver of the code generator. NVRTC is loaded with dlopen when a
// compiler is created, never linked, so every tejit binary starts on machines
// without the CUDA toolkit and says what is missing only when asked to
// compile. NVRTC needs no GPU and no driver.
//
// Targets: a requested real arch (`sm_90a`, `sm_89`, `sm_100a`) that NVRTC
// supports gets a cubin; an arch NVRTC does not know (a GPU newer than the
// toolkit) gets PTX for the newest older arch NVRTC supports, which the
// driver JIT-compiles forward. That PTX never uses an arch-specific (`a`)
// variant: such PTX does not run on later GPUs.
//
// Options are normalized (see normalizedOptions) so that the kernel cache can
// hash them: the same kernel asked for with the same options in any order
// gets the same option list, hence the same key.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_CODEGEN_NVRTCCOMPILER_H
#define TEJIT_CODEGEN_NVRTCCOMPILER_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <memory>
#include <string>
#include <vector>

namespace tejit::codegen {

/// What NVRTC is asked to produce for a requested arch.
struct NvrtcTarget {
  /// The `-arch=` value: `sm_90a` for a cubin, `compute_121` for PTX.
  std::string arch;
  /// True for a cubin, false for PTX.
  bool isCubin = true;
};

/// One compiled kernel.
struct CompiledKernel {
  /// The kernel's name (the NVRTC program is `<name>.cu`).
  std::string name;
  /// The cubin (an ELF image), or the PTX text without its terminating NUL
  /// (`binary.c_str()` is what cuModuleLoadData takes).
  std::string binary;
  bool isCubin = true;
  /// The `-arch=` value it was compiled for (NvrtcTarget::arch).
  std::string arch;
  /// NVRTC's log: empty, or warnings.
  std::string log;
};

/// A kernel to compile with NvrtcCompiler::compileAll.
struct KernelSource {
  std::string name;
  std::string source;
  /// The device arch, as for NvrtcCompiler::compile (`sm_90a`).
  std::string arch;
  std::vector<std::string> extraOptions;
};

/// Chooses the target for `requestedArch` (`sm_<N>` with an optional `a` or
/// `f` suffix) given NVRTC's supported archs (`nvrtcGetSupportedArchs`, e.g.
/// 90 for sm_90): a cubin when N is supported, else PTX for the largest
/// supported arch below N; an error when there is none, or when
/// `requestedArch` does not parse.
llvm::Expected<NvrtcTarget> selectTarget(llvm::StringRef requestedArch,
                                         llvm::ArrayRef<int> supportedArchs);

/// The options NVRTC gets for `targetArch` (NvrtcTarget::arch) and the
/// caller's `extra` options, in a canonical order. First the fixed options:
///   -arch=<targetArch> --std=c++17 --fmad=true --ftz=false
///   --prec-div=true --prec-sqrt=true
/// The numerics switches are NVRTC's defaults, spelled out so that a change
/// of default can never silently change the FP8 rounding of cached kernels;
/// --use_fast_math is off unless `extra` asks for it. No -I: generated
/// kernels must not need toolkit headers at run time. No
/// -default-device: generated code marks its device functions itself.
/// Then `extra`, de-duplicated and sorted, because flags and macro
/// definitions do not depend on order, except that only the last `-D` of a
/// macro is kept (the one a compiler command line would use), and include
/// options (`-I`, `--include-path=`, `-include`, `--pre-include=`) follow in
/// their given order, because search order matters. Errors: an option that
/// the driver owns (arch, language standard), or one not starting with `-`
/// (values must be joined: `-Idir`, `--opt=value`).
llvm::Expected<std::vector<std::string>>
normalizedOptions(llvm::StringRef targetArch,
                  llvm::ArrayRef<std::string> extra);

/// The dlopen'ed NVRTC entry points (NvrtcCompiler.cpp).
struct NvrtcLibrary;

/// Compiles CUDA C++ with NVRTC. Thread-safe: compile and compileAll may be
/// called from several threads at once.
class NvrtcCompiler {
public:
  /// Names the environment variable that, when set, is the only NVRTC
  /// library tried (a path or a soname).
  static constexpr const char *libraryPathEnv = "TEJIT_NVRTC_PATH";

  /// Where NVRTC is looked for, first found wins: $TEJIT_NVRTC_PATH alone
  /// when set; else libnvrtc.so.13 and libnvrtc.so on the loader's path,
  /// then in $CUDA_HOME/lib64, then in /usr/local/cuda/lib64.
  static std::vector<std::string> defaultLibraryPaths();

  /// Loads NVRTC from defaultLibraryPaths().
  static llvm::Expected<std::unique_ptr<NvrtcCompiler>> create();
  /// Loads NVRTC from the first of `libraryPaths` that opens; the error
  /// lists every path with the loader's (dlerror) reason.
  static llvm::Expected<std::unique_ptr<NvrtcCompiler>>
  create(llvm::ArrayRef<std::string> libraryPaths);

  ~NvrtcCompiler();

  /// NVRTC's version, `<major>.<minor>` (e.g. `13.0`), for cache keys.
  const std::string &nvrtcVersionString() const { return version; }
  /// The path or soname NVRTC was loaded from.
  const std::string &libraryPath() const;
  /// The archs NVRTC compiles for, ascending (90 for sm_90).
  llvm::ArrayRef<int> supportedArchs() const { return archs; }
  /// selectTarget with this NVRTC's supported archs.
  llvm::Expected<NvrtcTarget> target(llvm::StringRef requestedArch) const;

  /// Compiles `source` as program `<name>.cu` for `requestedArch`. On
  /// failure the error names the kernel, the NVRTC status, the options and
  /// holds NVRTC's full log.
  llvm::Expected<CompiledKernel>
  compile(llvm::StringRef source, llvm::StringRef name,
          llvm::StringRef requestedArch,
          llvm::ArrayRef<std::string> extraOptions = {}) const;

  /// Compiles independent kernels in parallel (one thread per hardware
  /// thread) and returns them in the order given; on failure, one error
  /// joining every kernel's error, in order.
  llvm::Expected<std::vector<CompiledKernel>>
  compileAll(llvm::ArrayRef<KernelSource> kernels) const;

private:
  NvrtcCompiler(std::unique_ptr<NvrtcLibrary> lib, std::string version,
                std::vector<int> archs);

  std::unique_ptr<NvrtcLibrary> lib;
  std::string version;
  std::vector<int> archs;
};

} // namespace tejit::codegen

#endif // TEJIT_CODEGEN_NVRTCCOMPILER_H
