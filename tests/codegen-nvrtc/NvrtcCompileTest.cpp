//===- NvrtcCompileTest.cpp - compiling kernels with the real NVRTC -------===//
//
// Compiles with the toolkit's NVRTC, which needs no GPU: cubins for the
// Hopper/Ada/Blackwell archs it supports, PTX for a GPU newer than it, errors
// that carry the full log, parallel compiles, and a clear error when NVRTC
// cannot be loaded.
//
//===----------------------------------------------------------------------===//
#include "codegen/NvrtcCompiler.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <cstdlib>
#include <optional>
#include <regex>
#include <thread>

using namespace tejit::codegen;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {
/// A self-contained FP8 kernel, as the emitter writes them: float to E4M3
/// pairs by PTX cvt (sm_89+), block amax by warp shuffles, one atomic per
/// block on the float's bits (non-negative floats order as unsigned ints).
constexpr const char *quantizeSource = R"cuda(
extern "C" __global__ void quantize_e4m3(const float *__restrict__ in,
                                         unsigned short *__restrict__ out,
                                         const float *__restrict__ scale,
                                         float *__restrict__ amax, int pairs) {
  __shared__ float warpAmax[32];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  float local = 0.0f;
  if (i < pairs) {
    float2 x = reinterpret_cast<const float2 *>(in)[i];
    float s = *scale;
    unsigned short packed;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;"
        : "=h"(packed) : "f"(x.y * s), "f"(x.x * s));
    out[i] = packed;
    local = fmaxf(fabsf(x.x), fabsf(x.y));
  }
  for (int offset = 16; offset > 0; offset /= 2)
    local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, offset));
  if (threadIdx.x % 32 == 0)
    warpAmax[threadIdx.x / 32] = local;
  __syncthreads();
  if (threadIdx.x < 32) {
    local = threadIdx.x < blockDim.x / 32 ? warpAmax[threadIdx.x] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2)
      local = fmaxf(local, __shfl_xor_sync(0xffffffffu, local, offset));
    if (threadIdx.x == 0)
      atomicMax(reinterpret_cast<unsigned int *>(amax), __float_as_uint(local));
  }
}
)cuda";

/// A kernel `<name>` that scales by `factor`.
std::string scaleKernel(llvm::StringRef name, int factor) {
  return llvm::formatv(R"cuda(
extern "C" __global__ void {0}(float *x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] *= {1}.0f;
}
)cuda",
                       name, factor);
}

class Nvrtc : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    llvm::Expected<std::unique_ptr<NvrtcCompiler>> created =
        NvrtcCompiler::create();
    if (!created) {
      loadError = llvm::toString(created.takeError());
      return;
    }
    compiler = std::move(*created);
  }
  static void TearDownTestSuite() { compiler.reset(); }

  void SetUp() override {
    ASSERT_TRUE(compiler) << "these tests need the CUDA toolkit's NVRTC:\n"
                          << loadError;
  }

  bool supports(int arch) {
    return llvm::is_contained(compiler->supportedArchs(), arch);
  }

  /// Compiles and fails the test on error.
  CompiledKernel expectCompiled(llvm::StringRef source, llvm::StringRef name,
                                llvm::StringRef arch,
                                llvm::ArrayRef<std::string> extra = {}) {
    llvm::Expected<CompiledKernel> kernel =
        compiler->compile(source, name, arch, extra);
    if (!kernel) {
      ADD_FAILURE() << llvm::toString(kernel.takeError());
      return {};
    }
    return std::move(*kernel);
  }

  /// Compiles and returns the error message; fails the test on success.
  std::string compileError(llvm::StringRef source, llvm::StringRef name,
                           llvm::StringRef arch = "sm_90a",
                           llvm::ArrayRef<std::string> extra = {}) {
    llvm::Expected<CompiledKernel> kernel =
        compiler->compile(source, name, arch, extra);
    if (kernel) {
      ADD_FAILURE() << name.str() << " compiled";
      return "";
    }
    return llvm::toString(kernel.takeError());
  }

  static std::unique_ptr<NvrtcCompiler> compiler;
  static std::string loadError;
};

std::unique_ptr<NvrtcCompiler> Nvrtc::compiler;
std::string Nvrtc::loadError;

/// True for an ELF image made for NVIDIA GPUs (e_machine EM_CUDA = 190).
bool isCudaElf(llvm::StringRef binary) {
  return binary.size() > 20 &&
         binary.starts_with("\x7f"
                            "ELF") &&
         static_cast<unsigned char>(binary[18]) == 190 && binary[19] == 0;
}

void expectFp8Cubin(const CompiledKernel &kernel, llvm::StringRef arch) {
  EXPECT_TRUE(kernel.isCubin);
  EXPECT_EQ(kernel.arch, arch);
  EXPECT_EQ(kernel.name, "quantize");
  EXPECT_TRUE(isCudaElf(kernel.binary)) << "not a CUDA ELF image";
  EXPECT_THAT(kernel.binary, HasSubstr("quantize_e4m3"));
}
} // namespace

TEST_F(Nvrtc, ReportsVersionAndSupportedArchs) {
  EXPECT_TRUE(std::regex_match(compiler->nvrtcVersionString(),
                               std::regex("[0-9]+\\.[0-9]+")))
      << compiler->nvrtcVersionString();
  llvm::ArrayRef<int> archs = compiler->supportedArchs();
  ASSERT_FALSE(archs.empty());
  EXPECT_TRUE(std::is_sorted(archs.begin(), archs.end()));
  // Hopper is what tejit is for: an NVRTC without sm_90 is useless to it.
  EXPECT_TRUE(supports(90));
  std::cout << "NVRTC " << compiler->nvrtcVersionString() << " from "
            << compiler->libraryPath() << ", archs sm_"
            << llvm::join(llvm::map_range(
                              archs, [](int a) { return std::to_string(a); }),
                          " sm_")
            << "\n";
}

TEST_F(Nvrtc, CompilesFp8KernelToHopperCubin) {
  CompiledKernel kernel = expectCompiled(quantizeSource, "quantize", "sm_90a");
  expectFp8Cubin(kernel, "sm_90a");
  EXPECT_EQ(kernel.log, "");
}

TEST_F(Nvrtc, CompilesFp8KernelToAdaCubin) {
  if (!supports(89))
    GTEST_SKIP() << "NVRTC " << compiler->nvrtcVersionString()
                 << " has no sm_89";
  expectFp8Cubin(expectCompiled(quantizeSource, "quantize", "sm_89"), "sm_89");
}

TEST_F(Nvrtc, CompilesFp8KernelToBlackwellCubin) {
  if (!supports(100))
    GTEST_SKIP() << "NVRTC " << compiler->nvrtcVersionString()
                 << " has no sm_100";
  expectFp8Cubin(expectCompiled(quantizeSource, "quantize", "sm_100a"),
                 "sm_100a");
}

TEST_F(Nvrtc, GpuNewerThanNvrtcGetsPtx) {
  int newest = compiler->supportedArchs().back();
  std::string future = "sm_" + std::to_string(newest + 10) + "a";
  CompiledKernel kernel = expectCompiled(quantizeSource, "quantize", future);
  EXPECT_FALSE(kernel.isCubin);
  EXPECT_EQ(kernel.arch, "compute_" + std::to_string(newest));
  EXPECT_THAT(kernel.binary, HasSubstr(".target sm_" + std::to_string(newest)));
  EXPECT_THAT(kernel.binary, HasSubstr(".entry quantize_e4m3"));
  EXPECT_THAT(kernel.binary, HasSubstr("cvt.rn.satfinite.e4m3x2.f32"));
  EXPECT_EQ(kernel.binary.find('\0'), std::string::npos);
}

TEST_F(Nvrtc, WarningsAreKeptInTheLog) {
  CompiledKernel kernel =
      expectCompiled("__global__ void k() { int unused; }", "warns", "sm_90a");
  EXPECT_TRUE(isCudaElf(kernel.binary));
  EXPECT_THAT(kernel.log, HasSubstr("warns.cu(1): warning"));
}

TEST_F(Nvrtc, ExtraOptionsReachNvrtc) {
  const char *source = "#if FACTOR != 3\n#error FACTOR must be 3\n#endif\n"
                       "__global__ void k(float *x) { *x *= FACTOR; }\n";
  expectCompiled(source, "defined", "sm_90a", {"-DFACTOR=3"});
  EXPECT_THAT(compileError(source, "defined", "sm_90a", {"-DFACTOR=2"}),
              HasSubstr("FACTOR must be 3"));
}

TEST_F(Nvrtc, SyntaxErrorNamesKernelOptionsAndLogLine) {
  std::string message = compileError(
      "__global__ void broken(float *x) {\n  *x = ;\n}\n", "broken");
  EXPECT_THAT(message, HasSubstr("NVRTC failed to compile kernel 'broken' "
                                 "(NVRTC_ERROR_COMPILATION)"));
  EXPECT_THAT(message, HasSubstr("options: -arch=sm_90a --std=c++17"));
  EXPECT_THAT(message,
              HasSubstr("broken.cu(2): error: expected an expression"));
}

TEST_F(Nvrtc, ErrorHoldsTheFullLog) {
  // Forty errors make a log far longer than any truncating reporter keeps.
  std::string source = "__global__ void many() {\n";
  for (int i = 0; i < 40; ++i)
    source += "  undeclared_" + std::to_string(i) + " = 1;\n";
  source += "}\n";
  std::string message = compileError(source, "many");
  EXPECT_THAT(message, HasSubstr("\"undeclared_0\" is undefined"));
  EXPECT_THAT(message, HasSubstr("\"undeclared_39\" is undefined"));
  EXPECT_THAT(message, HasSubstr("many.cu(41): error"));
}

TEST_F(Nvrtc, InvalidOptionIsReported) {
  EXPECT_THAT(
      compileError(quantizeSource, "quantize", "sm_90a", {"--no-such-option"}),
      HasSubstr("kernel 'quantize' (NVRTC_ERROR_INVALID_OPTION)"));
}

TEST_F(Nvrtc, UnusableArchNamesTheKernel) {
  EXPECT_THAT(compileError(quantizeSource, "quantize", "sm_20"),
              HasSubstr("kernel 'quantize': NVRTC cannot compile for sm_20"));
}

TEST_F(Nvrtc, ToolkitHeadersAreNotOnTheIncludePath) {
  // Generated kernels must be self-contained: the GPU machine's NVRTC finds
  // no toolkit headers either, so the driver must not add -I for them here.
  std::string message = compileError(
      "#include <cuda_fp8.h>\n__global__ void k() {}\n", "needs_headers");
  EXPECT_THAT(message, HasSubstr("needs_headers.cu(1)"));
  EXPECT_THAT(message, HasSubstr("cuda_fp8.h"));
  EXPECT_THAT(message, Not(HasSubstr("-I")));
}

TEST_F(Nvrtc, CompileAllKeepsOrder) {
  std::vector<KernelSource> kernels;
  for (int i = 0; i < 8; ++i) {
    std::string name = "scale" + std::to_string(i);
    kernels.push_back({name, scaleKernel(name, i), "sm_90a", {}});
  }
  llvm::Expected<std::vector<CompiledKernel>> compiled =
      compiler->compileAll(kernels);
  ASSERT_TRUE(static_cast<bool>(compiled))
      << llvm::toString(compiled.takeError());
  ASSERT_EQ(compiled->size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const CompiledKernel &kernel = (*compiled)[i];
    EXPECT_EQ(kernel.name, "scale" + std::to_string(i));
    EXPECT_TRUE(isCudaElf(kernel.binary)) << i;
    EXPECT_THAT(kernel.binary, HasSubstr("scale" + std::to_string(i)));
    for (int j = 0; j < 8; ++j) {
      if (j == i)
        continue;
      EXPECT_THAT(kernel.binary,
                  Not(HasSubstr("scale" + std::to_string(j) + '\0')))
          << i << " holds kernel " << j;
    }
  }
}

TEST_F(Nvrtc, CompileAllReportsEveryFailure) {
  std::vector<KernelSource> kernels;
  for (int i = 0; i < 8; ++i) {
    std::string name = "scale" + std::to_string(i);
    std::string source = scaleKernel(name, i);
    if (i == 2 || i == 5)
      source += "syntax error here\n";
    kernels.push_back({name, source, "sm_90a", {}});
  }
  llvm::Expected<std::vector<CompiledKernel>> compiled =
      compiler->compileAll(kernels);
  ASSERT_FALSE(static_cast<bool>(compiled));
  std::string message = llvm::toString(compiled.takeError());
  size_t two = message.find("kernel 'scale2'");
  size_t five = message.find("kernel 'scale5'");
  ASSERT_NE(two, std::string::npos) << message;
  ASSERT_NE(five, std::string::npos) << message;
  EXPECT_LT(two, five);
  EXPECT_THAT(message, HasSubstr("scale2.cu(7): error"));
  EXPECT_THAT(message, HasSubstr("scale5.cu(7): error"));
  for (int good : {0, 1, 3, 4, 6, 7})
    EXPECT_THAT(message, Not(HasSubstr("'scale" + std::to_string(good))));
}

TEST_F(Nvrtc, ConcurrentCompileAllCallsDoNotMix) {
  // The runtime may compile two layers' kernels from two threads at once.
  auto batch = [](const std::string &prefix) {
    std::vector<KernelSource> kernels;
    for (int i = 0; i < 3; ++i) {
      std::string name = prefix + std::to_string(i);
      kernels.push_back({name, scaleKernel(name, i), "sm_90a", {}});
    }
    return kernels;
  };
  std::vector<KernelSource> first = batch("first"), second = batch("second");
  std::optional<llvm::Expected<std::vector<CompiledKernel>>> a, b;
  std::thread other([&] { b.emplace(compiler->compileAll(second)); });
  a.emplace(compiler->compileAll(first));
  other.join();
  for (auto *result : {&a, &b})
    ASSERT_TRUE(static_cast<bool>(**result))
        << llvm::toString((*result)->takeError());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ((**a)[i].name, "first" + std::to_string(i));
    EXPECT_EQ((**b)[i].name, "second" + std::to_string(i));
    EXPECT_THAT((**b)[i].binary, HasSubstr("second" + std::to_string(i)));
  }
}

TEST(NvrtcLoad, MissingLibraryIsAClearError) {
  llvm::Expected<std::unique_ptr<NvrtcCompiler>> compiler =
      NvrtcCompiler::create({"/nonexistent/libnvrtc.so.13"});
  ASSERT_FALSE(static_cast<bool>(compiler));
  std::string message = llvm::toString(compiler.takeError());
  EXPECT_THAT(message, HasSubstr("cannot load NVRTC"));
  // dlerror's own words, with the path.
  EXPECT_THAT(message, HasSubstr("/nonexistent/libnvrtc.so.13: cannot open "
                                 "shared object file"));
  EXPECT_THAT(message, HasSubstr("TEJIT_NVRTC_PATH"));
}

TEST(NvrtcLoad, LibraryWithoutNvrtcSymbolsIsRejected) {
  llvm::Expected<std::unique_ptr<NvrtcCompiler>> compiler =
      NvrtcCompiler::create({"libm.so.6"});
  ASSERT_FALSE(static_cast<bool>(compiler));
  std::string message = llvm::toString(compiler.takeError());
  EXPECT_THAT(message, HasSubstr("libm.so.6 is not a usable NVRTC: "
                                 "nvrtcCreateProgram not found"));
  EXPECT_THAT(message, HasSubstr("nvrtcGetErrorString not found"));
}

TEST(NvrtcLoad, EnvironmentVariableForcesTheLibrary) {
  const char *saved = std::getenv(NvrtcCompiler::libraryPathEnv);
  std::string savedValue = saved ? saved : "";
  setenv(NvrtcCompiler::libraryPathEnv, "/bogus/libnvrtc.so", 1);
  std::vector<std::string> paths = NvrtcCompiler::defaultLibraryPaths();
  llvm::Expected<std::unique_ptr<NvrtcCompiler>> compiler =
      NvrtcCompiler::create();
  if (saved)
    setenv(NvrtcCompiler::libraryPathEnv, savedValue.c_str(), 1);
  else
    unsetenv(NvrtcCompiler::libraryPathEnv);
  EXPECT_EQ(paths, std::vector<std::string>{"/bogus/libnvrtc.so"});
  ASSERT_FALSE(static_cast<bool>(compiler));
  EXPECT_THAT(llvm::toString(compiler.takeError()),
              HasSubstr("/bogus/libnvrtc.so: cannot open shared object file"));
}

TEST(NvrtcLoad, DefaultSearchCoversLoaderPathAndToolkit) {
  const char *forced = std::getenv(NvrtcCompiler::libraryPathEnv);
  if (forced && *forced)
    GTEST_SKIP() << NvrtcCompiler::libraryPathEnv << " is set";
  std::vector<std::string> paths = NvrtcCompiler::defaultLibraryPaths();
  ASSERT_GE(paths.size(), 4u);
  EXPECT_EQ(paths[0], "libnvrtc.so.13");
  EXPECT_EQ(paths[1], "libnvrtc.so");
  EXPECT_EQ(paths.back(), "/usr/local/cuda/lib64/libnvrtc.so");
}
