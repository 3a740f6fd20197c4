//===- LibraryLoading.h - dlopen'ing the CUDA libraries ---------*- C++ -*-===//
//
// What the loaders of the CUDA driver, cuBLASLt and cuDNN share: tejit links
// none of them, so each is dlopen'ed on first use from a list of candidate
// names, its entry points are resolved by name with dlsym, and its version is
// checked and printed. The loaders keep their own messages and error codes;
// these helpers give them the pieces (dlerror's texts, the missing symbols,
// the version text) to write them from.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_LIBRARYLOADING_H
#define TEJIT_RUNTIME_LIBRARYLOADING_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"

#include <cstddef>
#include <string>
#include <vector>

namespace tejit::runtime {

/// dlopen(name, RTLD_NOW | RTLD_LOCAL): the handle, or null with why in
/// `failure` (dlerror's text, which names the file).
void *openLibrary(const char *name, std::string &failure);

/// The file the dynamic loader picked for `handle` (the name alone does not
/// say which of several installed copies answered); `name` when it cannot
/// tell.
std::string libraryPath(void *handle, llvm::StringRef name);

/// The first usable library of a list of candidate names.
struct LoadedLibrary {
  /// Null when no candidate was usable.
  void *handle = nullptr;
  /// The file it was loaded from (libraryPath).
  std::string path;
  /// Why each candidate before it (every one, when none was usable) was not
  /// usable, in order: dlerror's text, or what `accept` said.
  std::vector<std::string> failures;

  /// The failures as an indented list, one per line: "\n  <failure>...".
  std::string triedText() const;
};

/// Opens each of `names` in turn (openLibrary) and asks `accept` whether it
/// is usable: "" for yes, otherwise why not, and the library is dlclose'd
/// and the next name tried. The accepted library is never dlclose'd.
LoadedLibrary openFirstUsable(
    llvm::ArrayRef<const char *> names,
    llvm::function_ref<std::string(void *handle, llvm::StringRef name)> accept);

/// Resolves entry points of one library by name, collecting the missing
/// ones so that a single message can name them all:
///
///   SymbolResolver symbols(handle);
///   symbols.resolve(lib.cudnnCreate, "cudnnCreate");
///   if (!symbols.missing().empty()) ... symbols.missingText() ...
class SymbolResolver {
public:
  explicit SymbolResolver(void *handle) : handle(handle) {}

  /// dlsym(handle, name), or null (and `name` recorded as missing).
  void *lookup(const char *name);

  /// Sets `fn` to the function named `name`, or null.
  template <typename Fn> void resolve(Fn *&fn, const char *name) {
    fn = reinterpret_cast<Fn *>(lookup(name));
  }

  /// The names not found, in the order they were asked for.
  llvm::ArrayRef<std::string> missing() const { return missingNames; }
  /// "a, b, c".
  std::string missingText() const;

private:
  void *handle;
  std::vector<std::string> missingNames;
};

/// How a library encodes its version in one integer: major * majorUnit +
/// minor * minorUnit + patch (cuDNN 9 and cuBLASLt: 10000 and 100; the CUDA
/// driver and runtime: 1000 and 10).
struct VersionEncoding {
  size_t majorUnit;
  size_t minorUnit;
};

/// "major.minor.patch" of `version`, e.g. 90102 in {10000, 100} is "9.1.2".
std::string formatVersion(size_t version, VersionEncoding encoding);

/// A library with a minimum version, which it reports through an entry
/// point `size_t f(void)` (cudnnGetVersion, cublasLtGetVersion), and what
/// the messages about it call it.
struct VersionedLibrary {
  /// The candidate names, in order.
  llvm::ArrayRef<const char *> names;
  /// "cuDNN", for "libcudnn.so.9 is cuDNN 8.9.7; tejit needs 9.0.0 or newer".
  llvm::StringRef title;
  /// "cuDNN 9", for "libcudnn.so is not a usable cuDNN 9: it lacks ...".
  llvm::StringRef usableTitle;
  size_t minimumVersion;
  VersionEncoding encoding;

  /// formatVersion(version, encoding).
  std::string versionText(size_t version) const;
  /// Why the library opened as `name` is not usable, "" when it is: an entry
  /// point `symbols` did not find (all of them named), or a version (what
  /// `getVersion` returns, called only when nothing is missing, and stored
  /// in `version`) below minimumVersion.
  std::string check(llvm::StringRef name, const SymbolResolver &symbols,
                    size_t (*getVersion)(), size_t &version) const;
};

/// Loads into `lib` the first of spec.names that is usable (spec.check):
/// `resolve(SymbolResolver &, Library &)` resolves the entry points into a
/// fresh Library and returns its version function. `lib` gets the `version`
/// and `path` of the library loaded, and is left alone when none was usable.
template <typename Library, typename Resolve>
LoadedLibrary openFirstUsable(const VersionedLibrary &spec, Library &lib,
                              Resolve resolve) {
  LoadedLibrary loaded =
      openFirstUsable(spec.names, [&](void *handle, llvm::StringRef name) {
        Library candidate;
        SymbolResolver symbols(handle);
        size_t (*getVersion)() = resolve(symbols, candidate);
        std::string failure =
            spec.check(name, symbols, getVersion, candidate.version);
        if (failure.empty())
          lib = std::move(candidate);
        return failure;
      });
  if (loaded.handle)
    lib.path = loaded.path;
  return loaded;
}

} // namespace tejit::runtime

#endif // TEJIT_RUNTIME_LIBRARYLOADING_H
