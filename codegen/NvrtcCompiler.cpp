//===- NvrtcCompiler.cpp - CUDA C++ to cubin/PTX through NVRTC ------------===//
//
// NVRTC is reached only through dlopen/dlsym, with its C ABI declared here
// (nvrtc.h's enum is an int, its program handle a pointer), so tejit builds
// and starts without the CUDA toolkit.
//
//===----------------------------------------------------------------------===//
#include "codegen/NvrtcCompiler.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ThreadPool.h"

#include <cstdlib>
#include <dlfcn.h>
#include <optional>
#include <set>

using namespace tejit::codegen;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;

namespace {
using NvrtcResult = int; // nvrtcResult; NVRTC_SUCCESS is 0.
using NvrtcProgram = void *;
constexpr NvrtcResult nvrtcSuccess = 0;

Error makeError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}
} // namespace

/// NVRTC's entry points. The library is never dlclose'd: NVRTC may keep
/// threads and static state alive after the last program, and unloading
/// code under them would crash at exit.
struct tejit::codegen::NvrtcLibrary {
  std::string path;
  NvrtcResult (*createProgram)(NvrtcProgram *, const char *, const char *, int,
                               const char *const *, const char *const *);
  NvrtcResult (*compileProgram)(NvrtcProgram, int, const char *const *);
  NvrtcResult (*getCUBINSize)(NvrtcProgram, size_t *);
  NvrtcResult (*getCUBIN)(NvrtcProgram, char *);
  NvrtcResult (*getPTXSize)(NvrtcProgram, size_t *);
  NvrtcResult (*getPTX)(NvrtcProgram, char *);
  NvrtcResult (*getProgramLogSize)(NvrtcProgram, size_t *);
  NvrtcResult (*getProgramLog)(NvrtcProgram, char *);
  NvrtcResult (*destroyProgram)(NvrtcProgram *);
  NvrtcResult (*version)(int *, int *);
  NvrtcResult (*getNumSupportedArchs)(int *);
  NvrtcResult (*getSupportedArchs)(int *);
  const char *(*getErrorString)(NvrtcResult);

  /// Opens `path` and resolves every entry point; the error carries dlerror.
  static Expected<std::unique_ptr<NvrtcLibrary>> load(const std::string &path);

  /// `NVRTC_ERROR_...` for a status code.
  std::string statusName(NvrtcResult status) const {
    const char *name = getErrorString(status);
    return name ? name : "NVRTC status " + std::to_string(status);
  }
};

namespace {
/// Resolves symbols one after another and collects one error naming every
/// missing one.
class SymbolResolver {
public:
  SymbolResolver(void *handle, StringRef path) : handle(handle), path(path) {}

  template <typename Fn> void operator()(const char *symbol, Fn &fn) {
    dlerror();
    fn = reinterpret_cast<Fn>(dlsym(handle, symbol));
    if (fn)
      return;
    const char *reason = dlerror();
    err = llvm::joinErrors(std::move(err),
                           makeError(llvm::formatv(
                               "{0} is not a usable NVRTC: {1} not found "
                               "({2})",
                               path, symbol, reason ? reason : "null symbol")));
  }

  Error takeError() { return std::move(err); }

private:
  void *handle;
  StringRef path;
  Error err = Error::success();
};
} // namespace

Expected<std::unique_ptr<NvrtcLibrary>>
NvrtcLibrary::load(const std::string &path) {
  void *handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *reason = dlerror();
    return makeError(reason ? reason : path + ": dlopen failed");
  }
  auto lib = std::make_unique<NvrtcLibrary>();
  lib->path = path;
  SymbolResolver resolve(handle, path);
  resolve("nvrtcCreateProgram", lib->createProgram);
  resolve("nvrtcCompileProgram", lib->compileProgram);
  resolve("nvrtcGetCUBINSize", lib->getCUBINSize);
  resolve("nvrtcGetCUBIN", lib->getCUBIN);
  resolve("nvrtcGetPTXSize", lib->getPTXSize);
  resolve("nvrtcGetPTX", lib->getPTX);
  resolve("nvrtcGetProgramLogSize", lib->getProgramLogSize);
  resolve("nvrtcGetProgramLog", lib->getProgramLog);
  resolve("nvrtcDestroyProgram", lib->destroyProgram);
  resolve("nvrtcVersion", lib->version);
  resolve("nvrtcGetNumSupportedArchs", lib->getNumSupportedArchs);
  resolve("nvrtcGetSupportedArchs", lib->getSupportedArchs);
  resolve("nvrtcGetErrorString", lib->getErrorString);
  if (Error err = resolve.takeError()) {
    // Not NVRTC (or a broken one): nothing of it runs, so it can go.
    dlclose(handle);
    return std::move(err);
  }
  return std::move(lib);
}

//===----------------------------------------------------------------------===//
// Targets and options
//===----------------------------------------------------------------------===//

Expected<NvrtcTarget>
tejit::codegen::selectTarget(StringRef requestedArch,
                             llvm::ArrayRef<int> supportedArchs) {
  StringRef rest = requestedArch;
  unsigned number = 0;
  if (!rest.consume_front("sm_") || rest.consumeInteger(10, number) ||
      number < 10 || !(rest.empty() || rest == "a" || rest == "f"))
    return makeError(llvm::formatv(
        "'{0}' is not a device arch: expected sm_<number> with an optional "
        "'a' or 'f' suffix, e.g. sm_90a",
        requestedArch));
  int arch = static_cast<int>(number);
  if (llvm::is_contained(supportedArchs, arch))
    return NvrtcTarget{requestedArch.str(), /*isCubin=*/true};
  // A GPU newer than NVRTC: PTX for the closest older arch runs on it after
  // the driver's JIT, as long as it is not an arch-specific variant.
  std::optional<int> older;
  for (int supported : supportedArchs)
    if (supported < arch && (!older || supported > *older))
      older = supported;
  if (!older)
    return makeError(llvm::formatv(
        "NVRTC cannot compile for {0}: it supports only sm_{1}", requestedArch,
        llvm::join(llvm::map_range(supportedArchs,
                                   [](int a) { return std::to_string(a); }),
                   ", sm_")));
  return NvrtcTarget{"compute_" + std::to_string(*older), /*isCubin=*/false};
}

namespace {
bool isIncludeOption(StringRef option) {
  return option.starts_with("-I") || option.starts_with("--include-path=") ||
         option.starts_with("-include") || option.starts_with("--pre-include=");
}

/// The macro a -D/-U option defines or undefines, or "" for other options.
StringRef macroName(StringRef option) {
  if (!option.consume_front("-D") && !option.consume_front("-U") &&
      !option.consume_front("--define-macro=") &&
      !option.consume_front("--undefine-macro="))
    return "";
  return option.take_until([](char c) { return c == '='; });
}

Error checkExtraOption(StringRef option) {
  if (!option.starts_with("-"))
    return makeError(llvm::formatv(
        "NVRTC option '{0}' does not start with '-': join option values "
        "(-Idir, --opt=value)",
        option));
  for (StringRef owned : {"-arch", "--gpu-architecture", "-std", "--std"})
    if (option.starts_with(owned))
      return makeError(llvm::formatv(
          "NVRTC option '{0}' is set by the compiler driver: pass the arch "
          "to compile(); the language is C++17",
          option));
  return Error::success();
}
} // namespace

Expected<std::vector<std::string>>
tejit::codegen::normalizedOptions(StringRef targetArch,
                                  llvm::ArrayRef<std::string> extra) {
  std::vector<std::string> options = {"-arch=" + targetArch.str(),
                                      "--std=c++17",
                                      "--fmad=true",
                                      "--ftz=false",
                                      "--prec-div=true",
                                      "--prec-sqrt=true"};
  std::set<std::string> orderFree;
  llvm::StringMap<std::string> lastMacroOption;
  std::vector<std::string> includes;
  for (const std::string &option : extra) {
    if (Error err = checkExtraOption(option))
      return std::move(err);
    if (isIncludeOption(option))
      includes.push_back(option);
    else if (StringRef macro = macroName(option); !macro.empty())
      lastMacroOption[macro] = option;
    else
      orderFree.insert(option);
  }
  for (const auto &entry : lastMacroOption)
    orderFree.insert(entry.second);
  llvm::append_range(options, orderFree);
  llvm::append_range(options, includes);
  return options;
}

//===----------------------------------------------------------------------===//
// Loading
//===----------------------------------------------------------------------===//

std::vector<std::string> NvrtcCompiler::defaultLibraryPaths() {
  if (const char *forced = std::getenv(libraryPathEnv); forced && *forced)
    return {forced};
  // Major 13 first: the ABI this driver was written against. The unversioned
  // name (a toolkit's development link) covers other releases.
  const char *names[] = {"libnvrtc.so.13", "libnvrtc.so"};
  std::vector<std::string> paths(std::begin(names), std::end(names));
  std::vector<std::string> dirs;
  if (const char *cudaHome = std::getenv("CUDA_HOME"); cudaHome && *cudaHome)
    dirs.push_back(std::string(cudaHome) + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  for (const std::string &dir : dirs)
    for (const char *name : names)
      paths.push_back(dir + "/" + name);
  return paths;
}

Expected<std::unique_ptr<NvrtcCompiler>> NvrtcCompiler::create() {
  return create(defaultLibraryPaths());
}

Expected<std::unique_ptr<NvrtcCompiler>>
NvrtcCompiler::create(llvm::ArrayRef<std::string> libraryPaths) {
  std::string tried;
  std::unique_ptr<NvrtcLibrary> lib;
  for (const std::string &path : libraryPaths) {
    Expected<std::unique_ptr<NvrtcLibrary>> loaded = NvrtcLibrary::load(path);
    if (loaded) {
      lib = std::move(*loaded);
      break;
    }
    tried += "\n  " + llvm::toString(loaded.takeError());
  }
  if (!lib)
    return makeError(llvm::formatv(
        "cannot load NVRTC, the CUDA runtime compiler; tried:{0}\nInstall "
        "the CUDA toolkit's NVRTC (libnvrtc.so.13), or set {1} to its path",
        tried, libraryPathEnv));

  int major = 0, minor = 0, count = 0;
  std::vector<int> archs;
  if (NvrtcResult status = lib->version(&major, &minor); status != nvrtcSuccess)
    return makeError(lib->path +
                     ": nvrtcVersion failed: " + lib->statusName(status));
  if (NvrtcResult status = lib->getNumSupportedArchs(&count);
      status != nvrtcSuccess)
    return makeError(lib->path + ": nvrtcGetNumSupportedArchs failed: " +
                     lib->statusName(status));
  archs.resize(count);
  if (NvrtcResult status = lib->getSupportedArchs(archs.data());
      status != nvrtcSuccess)
    return makeError(lib->path + ": nvrtcGetSupportedArchs failed: " +
                     lib->statusName(status));
  llvm::sort(archs);
  std::string version = std::to_string(major) + "." + std::to_string(minor);
  return std::unique_ptr<NvrtcCompiler>(
      new NvrtcCompiler(std::move(lib), std::move(version), std::move(archs)));
}

NvrtcCompiler::NvrtcCompiler(std::unique_ptr<NvrtcLibrary> lib,
                             std::string version, std::vector<int> archs)
    : lib(std::move(lib)), version(std::move(version)),
      archs(std::move(archs)) {}

NvrtcCompiler::~NvrtcCompiler() = default;

const std::string &NvrtcCompiler::libraryPath() const { return lib->path; }

Expected<NvrtcTarget> NvrtcCompiler::target(StringRef requestedArch) const {
  return selectTarget(requestedArch, archs);
}

//===----------------------------------------------------------------------===//
// Compiling
//===----------------------------------------------------------------------===//

namespace {
/// Destroys an NVRTC program on every path out of compile().
class ProgramGuard {
public:
  ProgramGuard(const NvrtcLibrary &lib) : lib(lib) {}
  ~ProgramGuard() {
    if (program)
      lib.destroyProgram(&program);
  }
  NvrtcProgram program = nullptr;

private:
  const NvrtcLibrary &lib;
};

/// Reads one of NVRTC's outputs (log, PTX, cubin) through its size/get pair,
/// dropping the NUL that NVRTC counts in text sizes.
template <typename SizeFn, typename GetFn>
Expected<std::string> readOutput(const NvrtcLibrary &lib, NvrtcProgram program,
                                 SizeFn sizeFn, GetFn getFn, StringRef what) {
  size_t size = 0;
  NvrtcResult status = sizeFn(program, &size);
  std::string out(size, '\0');
  if (status == nvrtcSuccess && size)
    status = getFn(program, out.data());
  if (status != nvrtcSuccess)
    return makeError("cannot read the NVRTC " + what + ": " +
                     lib.statusName(status));
  if (what != "cubin" && !out.empty() && out.back() == '\0')
    out.pop_back();
  return out;
}

Error compileError(StringRef name, StringRef status,
                   llvm::ArrayRef<std::string> options, StringRef log) {
  return makeError(llvm::formatv(
      "NVRTC failed to compile kernel '{0}' ({1})\noptions: {2}\nlog:\n{3}",
      name, status, llvm::join(options, " "), log.empty() ? "(empty)" : log));
}
} // namespace

Expected<CompiledKernel>
NvrtcCompiler::compile(StringRef source, StringRef name,
                       StringRef requestedArch,
                       llvm::ArrayRef<std::string> extraOptions) const {
  Expected<NvrtcTarget> target = this->target(requestedArch);
  if (!target)
    return makeError("kernel '" + name +
                     "': " + llvm::toString(target.takeError()));
  Expected<std::vector<std::string>> options =
      normalizedOptions(target->arch, extraOptions);
  if (!options)
    return makeError("kernel '" + name +
                     "': " + llvm::toString(options.takeError()));

  ProgramGuard guard(*lib);
  std::string programName = (name + ".cu").str();
  std::string sourceText = source.str();
  if (NvrtcResult status =
          lib->createProgram(&guard.program, sourceText.c_str(),
                             programName.c_str(), 0, nullptr, nullptr);
      status != nvrtcSuccess)
    return compileError(name, lib->statusName(status), *options, "");

  std::vector<const char *> argv;
  for (const std::string &option : *options)
    argv.push_back(option.c_str());
  NvrtcResult status =
      lib->compileProgram(guard.program, argv.size(), argv.data());
  Expected<std::string> log = readOutput(
      *lib, guard.program, lib->getProgramLogSize, lib->getProgramLog, "log");
  if (!log)
    return log.takeError();
  if (status != nvrtcSuccess)
    return compileError(name, lib->statusName(status), *options, *log);

  Expected<std::string> binary =
      target->isCubin ? readOutput(*lib, guard.program, lib->getCUBINSize,
                                   lib->getCUBIN, "cubin")
                      : readOutput(*lib, guard.program, lib->getPTXSize,
                                   lib->getPTX, "PTX");
  if (!binary)
    return makeError("kernel '" + name +
                     "': " + llvm::toString(binary.takeError()));
  return CompiledKernel{name.str(), std::move(*binary), target->isCubin,
                        target->arch, std::move(*log)};
}

Expected<std::vector<CompiledKernel>>
NvrtcCompiler::compileAll(llvm::ArrayRef<KernelSource> kernels) const {
  std::vector<std::optional<Expected<CompiledKernel>>> results(kernels.size());
  {
    // Threads start on demand, so a pool per call costs little next to one
    // NVRTC compile, and concurrent compileAll calls never wait on each
    // other's tasks.
    llvm::DefaultThreadPool pool(llvm::hardware_concurrency());
    for (size_t i = 0; i < kernels.size(); ++i)
      pool.async([this, &kernels, &results, i] {
        const KernelSource &kernel = kernels[i];
        results[i].emplace(compile(kernel.source, kernel.name, kernel.arch,
                                   kernel.extraOptions));
      });
    pool.wait();
  }
  Error errors = Error::success();
  std::vector<CompiledKernel> compiled;
  compiled.reserve(kernels.size());
  for (std::optional<Expected<CompiledKernel>> &result : results) {
    if (*result)
      compiled.push_back(std::move(**result));
    else
      errors = llvm::joinErrors(std::move(errors), result->takeError());
  }
  if (errors)
    return std::move(errors);
  return compiled;
}
