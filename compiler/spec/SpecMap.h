//===- SpecMap.h - typed, located reads of one spec mapping -----*- C++ -*-===//
#ifndef TEJIT_COMPILER_SPEC_SPECMAP_H
#define TEJIT_COMPILER_SPEC_SPECMAP_H

#include "compiler/spec/SpecTree.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <optional>

namespace tejit::spec {

/// The largest size or count a spec may give: bounds every tensor dim so
/// that the products the importer and the verifiers form stay in int64.
constexpr int64_t kMaxSpecSize = int64_t(1) << 30;

/// Reads the fields of one mapping of a spec. Every read marks its key as
/// known; `finish()` then rejects the keys nobody asked for, suggesting the
/// closest known one, and then reports the required keys that are missing
/// (so a misspelled required key is reported as such, not as missing).
/// `finish()` must be called once all keys are read, even when reads failed.
/// Other errors are reported at once, at the offending key or value.
class SpecMap {
public:
  /// `what` names the mapping in messages ("TransformerLayer", "recipe").
  SpecMap(const SpecNode &node, const SpecLocations &locations,
          llvm::StringRef what);

  /// Checks that `node` is a mapping; reports "`what` must be a mapping".
  static mlir::FailureOr<SpecMap> get(const SpecNode &node,
                                      const SpecLocations &locations,
                                      llvm::StringRef what);

  mlir::FailureOr<std::optional<int64_t>> getInt(llvm::StringRef key);
  mlir::FailureOr<std::optional<double>> getFloat(llvm::StringRef key);
  mlir::FailureOr<std::optional<bool>> getBool(llvm::StringRef key);
  mlir::FailureOr<std::optional<std::string>> getString(llvm::StringRef key);
  /// One of `choices`, matched case-insensitively; returns the choice as
  /// spelled in `choices`.
  mlir::FailureOr<std::optional<std::string>>
  getChoice(llvm::StringRef key, llvm::ArrayRef<llvm::StringRef> choices);

  mlir::FailureOr<int64_t> getInt(llvm::StringRef key, int64_t fallback);
  mlir::FailureOr<double> getFloat(llvm::StringRef key, double fallback);
  mlir::FailureOr<bool> getBool(llvm::StringRef key, bool fallback);
  /// Required keys: a missing one fails here and is reported by `finish()`.
  mlir::FailureOr<int64_t> requireInt(llvm::StringRef key);
  /// Integer in [1, kMaxSpecSize] (a size or a count).
  mlir::FailureOr<int64_t> requirePositive(llvm::StringRef key);
  mlir::FailureOr<std::optional<int64_t>> getPositive(llvm::StringRef key);

  /// A list of exactly `size` integers ("[4096, 0]"), or nullopt when
  /// absent or null.
  mlir::FailureOr<std::optional<llvm::SmallVector<int64_t>>>
  getIntList(llvm::StringRef key, size_t size);

  /// The raw node of `key`, or null; marks the key as known.
  const SpecNode *getNode(llvm::StringRef key);

  /// Marks keys that are read elsewhere (or on purpose ignored) as known.
  void allow(llvm::ArrayRef<llvm::StringRef> keys);

  /// Reports the first unknown key, with a suggestion when one is close;
  /// else the missing required keys.
  mlir::LogicalResult finish();

  /// For a key that must be read before the others are known (a `type`):
  /// when it is missing because an unknown key is a misspelling of it,
  /// reports that key and fails.
  mlir::LogicalResult checkMisspelled(llvm::StringRef key);

  bool has(llvm::StringRef key) const { return find(key) != nullptr; }
  mlir::Location loc() const { return locations.get(node.loc); }
  mlir::Location keyLoc(llvm::StringRef key) const;
  mlir::Location valueLoc(llvm::StringRef key) const;
  llvm::StringRef getWhat() const { return what; }
  void setWhat(llvm::StringRef newWhat) { what = newWhat.str(); }
  const SpecLocations &getLocations() const { return locations; }

private:
  const SpecEntry *find(llvm::StringRef key) const;
  /// The entries whose key nobody asked for.
  llvm::SmallVector<const SpecEntry *> unknownEntries() const;
  void reportUnknown(const SpecEntry &entry,
                     llvm::ArrayRef<llvm::StringRef> candidates,
                     bool listValid);
  /// The scalar value of `key`, or null when absent or null; reports an
  /// error and fails when it is a mapping or list.
  mlir::FailureOr<const SpecNode *> scalar(llvm::StringRef key,
                                           llvm::StringRef expected);
  /// Reads `key` as a bare scalar that `parse` turns into a T; `expected`
  /// names the type in errors ("an integer").
  template <typename T>
  mlir::FailureOr<std::optional<T>>
  readScalar(llvm::StringRef key, llvm::StringRef expected,
             llvm::function_ref<std::optional<T>(llvm::StringRef)> parse);
  mlir::InFlightDiagnostic typeError(llvm::StringRef key,
                                     llvm::StringRef expected,
                                     const SpecNode &value);

  const SpecNode &node;
  const SpecLocations &locations;
  std::string what;
  llvm::SmallVector<llvm::StringRef> known;
  llvm::SmallVector<llvm::StringRef> missing;

  /// `value` of required `key`, recording the key as missing when absent.
  mlir::FailureOr<int64_t>
  required(llvm::StringRef key, mlir::FailureOr<std::optional<int64_t>> value);
};

/// The candidate closest to `word` by edit distance, if close enough to be a
/// plausible misspelling.
std::optional<llvm::StringRef>
closestMatch(llvm::StringRef word, llvm::ArrayRef<llvm::StringRef> candidates);

} // namespace tejit::spec

#endif // TEJIT_COMPILER_SPEC_SPECMAP_H
