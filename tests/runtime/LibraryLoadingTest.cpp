//===- LibraryLoadingTest.cpp - the dlopen helpers without CUDA -----------===//
//
// The helpers behind the CUDA driver, cuBLASLt and cuDNN loaders, checked
// against libraries every Linux machine has (libm, libc) and names no
// machine has: every tried name is reported with dlerror's text, a library
// the caller rejects is skipped for the next one, missing symbols are named
// in order, versions print in each library's encoding, and a versioned
// library (cuDNN's and cuBLASLt's loaders) says why each candidate is too
// old or lacks entry points.
//
//===----------------------------------------------------------------------===//
#include "runtime/LibraryLoading.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <dlfcn.h>

using namespace tejit::runtime;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

std::string acceptAll(void *, llvm::StringRef) { return ""; }

void notResolvedYet() {}

TEST(LibraryLoading, OpenLibrarySaysWhyNot) {
  std::string failure;
  EXPECT_EQ(openLibrary("/nonexistent/libtejit-none.so", failure), nullptr);
  EXPECT_THAT(failure, HasSubstr("/nonexistent/libtejit-none.so: cannot open "
                                 "shared object file"));
}

TEST(LibraryLoading, NoUsableNameListsEveryTriedName) {
  const char *const names[] = {"/nonexistent/libtejit-a.so",
                               "libtejit-b-does-not-exist.so.9"};
  bool asked = false;
  LoadedLibrary loaded =
      openFirstUsable(names, [&](void *handle, llvm::StringRef name) {
        asked = true;
        return acceptAll(handle, name);
      });
  EXPECT_EQ(loaded.handle, nullptr);
  EXPECT_FALSE(asked) << "nothing opened, so nothing to accept";
  ASSERT_EQ(loaded.failures.size(), 2u);
  EXPECT_THAT(loaded.failures[0], HasSubstr(names[0]));
  EXPECT_THAT(loaded.failures[1], HasSubstr(names[1]));
  std::string tried = loaded.triedText();
  EXPECT_THAT(tried, StartsWith("\n  /nonexistent/libtejit-a.so: "));
  EXPECT_THAT(tried, HasSubstr("\n  libtejit-b-does-not-exist.so.9: "));
}

TEST(LibraryLoading, FirstUsableNameWins) {
  const char *const names[] = {"/nonexistent/libtejit-a.so", "libm.so.6",
                               "libc.so.6"};
  LoadedLibrary loaded = openFirstUsable(names, acceptAll);
  ASSERT_NE(loaded.handle, nullptr) << loaded.triedText();
  // The unloadable name before it is reported; the one after is not tried.
  ASSERT_EQ(loaded.failures.size(), 1u);
  EXPECT_THAT(loaded.failures[0], HasSubstr("/nonexistent/libtejit-a.so"));
  // The file the loader found, not the name asked for.
  EXPECT_THAT(loaded.path, StartsWith("/"));
  EXPECT_THAT(loaded.path, HasSubstr("libm"));
  dlclose(loaded.handle);
}

TEST(LibraryLoading, RejectedLibraryIsSkippedWithTheReason) {
  const char *const names[] = {"libm.so.6", "libc.so.6"};
  std::vector<std::string> asked;
  LoadedLibrary loaded =
      openFirstUsable(names, [&](void *handle, llvm::StringRef name) {
        asked.push_back(name.str());
        return name == "libm.so.6" ? name.str() + " is not the one" : "";
      });
  ASSERT_NE(loaded.handle, nullptr) << loaded.triedText();
  EXPECT_THAT(asked, ElementsAre("libm.so.6", "libc.so.6"));
  EXPECT_THAT(loaded.failures, ElementsAre("libm.so.6 is not the one"));
  EXPECT_THAT(loaded.path, HasSubstr("libc"));
  dlclose(loaded.handle);
}

TEST(LibraryLoading, ResolvesSymbolsAndNamesTheMissingOnes) {
  std::string failure;
  void *handle = openLibrary("libm.so.6", failure);
  ASSERT_NE(handle, nullptr) << failure;
  SymbolResolver symbols(handle);
  double (*cosine)(double) = nullptr;
  symbols.resolve(cosine, "cos");
  ASSERT_NE(cosine, nullptr);
  EXPECT_EQ(cosine(0.0), 1.0);
  EXPECT_TRUE(symbols.missing().empty());
  EXPECT_EQ(symbols.missingText(), "");

  void (*first)() = &notResolvedYet;
  int (*second)(int) = nullptr;
  symbols.resolve(first, "tejitNoSuchFunction");
  symbols.resolve(second, "tejitNorThisOne");
  EXPECT_EQ(first, nullptr);
  EXPECT_EQ(second, nullptr);
  EXPECT_THAT(symbols.missing(),
              ElementsAre("tejitNoSuchFunction", "tejitNorThisOne"));
  EXPECT_EQ(symbols.missingText(), "tejitNoSuchFunction, tejitNorThisOne");
  // A failed lookup leaves no stale dlerror text behind.
  EXPECT_EQ(dlerror(), nullptr);
  dlclose(handle);
}

TEST(LibraryLoading, FormatsVersionsInTheLibrarysEncoding) {
  // cuDNN 9 and cuBLASLt: major * 10000 + minor * 100 + patch.
  EXPECT_EQ(formatVersion(90102, {10000, 100}), "9.1.2");
  EXPECT_EQ(formatVersion(91002, {10000, 100}), "9.10.2");
  EXPECT_EQ(formatVersion(130100, {10000, 100}), "13.1.0");
  // The CUDA driver and runtime: major * 1000 + minor * 10.
  EXPECT_EQ(formatVersion(12040, {1000, 10}), "12.4.0");
  EXPECT_EQ(formatVersion(13000, {1000, 10}), "13.0.0");
}

/// A library as the loaders see it: entry points, the version and the file.
struct FakeLibrary {
  double (*cos)(double) = nullptr;
  void (*create)() = nullptr;
  void (*destroy)() = nullptr;
  size_t version = 0;
  std::string path;
};

const char *const fakeNames[] = {"/nonexistent/libfake.so.9", "libm.so.6"};
constexpr VersionedLibrary fake = {
    fakeNames, "Fake", "Fake 9", 90000, {10000, 100}};

size_t version80102() { return 80102; }
size_t version90300() { return 90300; }
bool versionAsked = false;
size_t noteVersionAsked() {
  versionAsked = true;
  return 90000;
}

/// Loads `fake` into `lib`, whose version `getVersion` gives: libm has its
/// cos, and lacks the create and destroy entry points when asked for them.
LoadedLibrary loadFake(FakeLibrary &lib, size_t (*getVersion)(),
                       bool askForMissing = false) {
  return openFirstUsable(fake, lib,
                         [&](SymbolResolver &symbols, FakeLibrary &candidate) {
                           symbols.resolve(candidate.cos, "cos");
                           if (askForMissing) {
                             symbols.resolve(candidate.create, "fakeCreate");
                             symbols.resolve(candidate.destroy, "fakeDestroy");
                           }
                           return getVersion;
                         });
}

TEST(LibraryLoading, VersionedLibraryLoadsTheFirstRecentEnoughOne) {
  FakeLibrary lib;
  LoadedLibrary loaded = loadFake(lib, &version90300);
  ASSERT_NE(loaded.handle, nullptr) << loaded.triedText();
  ASSERT_NE(lib.cos, nullptr);
  EXPECT_EQ(lib.cos(0.0), 1.0);
  EXPECT_EQ(lib.version, 90300u);
  EXPECT_EQ(lib.path, loaded.path);
  EXPECT_THAT(lib.path, HasSubstr("libm"));
  EXPECT_EQ(fake.versionText(lib.version), "9.3.0");
  dlclose(loaded.handle);
}

TEST(LibraryLoading, VersionedLibrarySaysWhyEachCandidateIsUnusable) {
  FakeLibrary lib;
  LoadedLibrary tooOld = loadFake(lib, &version80102);
  EXPECT_EQ(tooOld.handle, nullptr);
  ASSERT_EQ(tooOld.failures.size(), 2u);
  EXPECT_THAT(tooOld.failures[0], HasSubstr("/nonexistent/libfake.so.9"));
  EXPECT_EQ(tooOld.failures[1],
            "libm.so.6 is Fake 8.1.2; tejit needs 9.0.0 or newer");

  versionAsked = false;
  LoadedLibrary lacking =
      loadFake(lib, &noteVersionAsked, /*askForMissing=*/true);
  EXPECT_EQ(lacking.handle, nullptr);
  ASSERT_EQ(lacking.failures.size(), 2u);
  EXPECT_EQ(lacking.failures[1], "libm.so.6 is not a usable Fake 9: it lacks "
                                 "fakeCreate, fakeDestroy");
  // The version of a library that lacks entry points is not asked for.
  EXPECT_FALSE(versionAsked);

  // A library that was not usable leaves `lib` alone.
  EXPECT_EQ(lib.cos, nullptr);
  EXPECT_EQ(lib.version, 0u);
  EXPECT_EQ(lib.path, "");
}

} // namespace
