//===- LibraryLoading.cpp - dlopen'ing the CUDA libraries -----------------===//
#include "runtime/LibraryLoading.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <dlfcn.h>
#include <link.h>

using namespace tejit::runtime;

void *tejit::runtime::openLibrary(const char *name, std::string &failure) {
  void *handle = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *reason = dlerror();
    failure = reason ? reason : std::string(name) + ": dlopen failed";
  }
  return handle;
}

std::string tejit::runtime::libraryPath(void *handle, llvm::StringRef name) {
  struct link_map *map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name &&
      *map->l_name)
    return map->l_name;
  dlerror();
  return name.str();
}

std::string LoadedLibrary::triedText() const {
  std::string text;
  for (const std::string &failure : failures)
    text += "\n  " + failure;
  return text;
}

LoadedLibrary tejit::runtime::openFirstUsable(
    llvm::ArrayRef<const char *> names,
    llvm::function_ref<std::string(void *handle, llvm::StringRef name)>
        accept) {
  LoadedLibrary result;
  for (const char *name : names) {
    std::string failure;
    void *handle = openLibrary(name, failure);
    if (handle) {
      failure = accept(handle, name);
      if (failure.empty()) {
        result.handle = handle;
        result.path = libraryPath(handle, name);
        return result;
      }
      // Nothing of it runs, so it can go.
      dlclose(handle);
    }
    result.failures.push_back(std::move(failure));
  }
  return result;
}

void *SymbolResolver::lookup(const char *name) {
  void *address = dlsym(handle, name);
  if (!address) {
    dlerror();
    missingNames.emplace_back(name);
  }
  return address;
}

std::string SymbolResolver::missingText() const {
  return llvm::join(missingNames, ", ");
}

std::string tejit::runtime::formatVersion(size_t version,
                                          VersionEncoding encoding) {
  return llvm::formatv("{0}.{1}.{2}", version / encoding.majorUnit,
                       version % encoding.majorUnit / encoding.minorUnit,
                       version % encoding.minorUnit)
      .str();
}

std::string VersionedLibrary::versionText(size_t version) const {
  return formatVersion(version, encoding);
}

std::string VersionedLibrary::check(llvm::StringRef name,
                                    const SymbolResolver &symbols,
                                    size_t (*getVersion)(),
                                    size_t &version) const {
  if (!symbols.missing().empty())
    return llvm::formatv("{0} is not a usable {1}: it lacks {2}", name,
                         usableTitle, symbols.missingText());
  version = getVersion();
  if (version < minimumVersion)
    return llvm::formatv("{0} is {1} {2}; tejit needs {3} or newer", name,
                         title, versionText(version),
                         versionText(minimumVersion));
  return "";
}
