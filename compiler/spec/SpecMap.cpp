//===- SpecMap.cpp - typed, located reads of one spec mapping
//--------------===//
#include "compiler/spec/SpecMap.h"

#include "mlir/IR/Diagnostics.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace tejit::spec;
using llvm::StringRef;

std::optional<StringRef>
tejit::spec::closestMatch(StringRef word,
                          llvm::ArrayRef<StringRef> candidates) {
  std::string lower = word.lower();
  std::optional<StringRef> best;
  unsigned bestDistance = ~0u;
  for (StringRef candidate : candidates) {
    unsigned distance =
        StringRef(lower).edit_distance(candidate.lower(), true, bestDistance);
    if (distance < bestDistance) {
      bestDistance = distance;
      best = candidate;
    }
  }
  // A misspelling changes a few characters, about one in three; further
  // than that, a suggestion only misleads ('thd' is not a misspelled 'sbhd').
  unsigned limit = (word.size() + 2) / 3;
  if (best && bestDistance <= limit)
    return best;
  return std::nullopt;
}

SpecMap::SpecMap(const SpecNode &node, const SpecLocations &locations,
                 StringRef what)
    : node(node), locations(locations), what(what.str()) {}

FailureOr<SpecMap> SpecMap::get(const SpecNode &node,
                                const SpecLocations &locations,
                                StringRef what) {
  if (node.kind != SpecNode::Kind::Mapping)
    return emitError(locations.get(node.loc))
           << what << " must be a mapping of keys to values, got "
           << node.describe();
  return SpecMap(node, locations, what);
}

const SpecEntry *SpecMap::find(StringRef key) const {
  for (const SpecEntry &entry : node.entries)
    if (entry.key == key)
      return &entry;
  return nullptr;
}

Location SpecMap::keyLoc(StringRef key) const {
  const SpecEntry *entry = find(key);
  return entry ? locations.get(entry->keyLoc) : loc();
}

Location SpecMap::valueLoc(StringRef key) const {
  const SpecEntry *entry = find(key);
  return entry ? locations.get(entry->value->loc) : loc();
}

void SpecMap::allow(llvm::ArrayRef<StringRef> keys) {
  for (StringRef key : keys)
    if (!llvm::is_contained(known, key))
      known.push_back(key);
}

const SpecNode *SpecMap::getNode(StringRef key) {
  allow(key);
  const SpecEntry *entry = find(key);
  return entry ? entry->value.get() : nullptr;
}

InFlightDiagnostic SpecMap::typeError(StringRef key, StringRef expected,
                                      const SpecNode &value) {
  InFlightDiagnostic diag = emitError(locations.get(value.loc));
  diag << "'" << key << "' in " << what << " must be " << expected << ", got ";
  if (value.kind == SpecNode::Kind::Scalar && !value.isNull())
    diag << (value.quoted ? "the string " : "") << "'" << value.text << "'";
  else
    diag << value.describe();
  return diag;
}

FailureOr<const SpecNode *> SpecMap::scalar(StringRef key, StringRef expected) {
  const SpecNode *value = getNode(key);
  if (!value || value->isNull())
    return static_cast<const SpecNode *>(nullptr);
  if (value->kind != SpecNode::Kind::Scalar)
    return typeError(key, expected, *value);
  return value;
}

template <typename T>
FailureOr<std::optional<T>>
SpecMap::readScalar(StringRef key, StringRef expected,
                    llvm::function_ref<std::optional<T>(StringRef)> parse) {
  FailureOr<const SpecNode *> value = scalar(key, expected);
  if (failed(value))
    return failure();
  if (!*value)
    return std::optional<T>();
  // A quoted value is a string, even when its text would parse.
  std::optional<T> result =
      (*value)->quoted ? std::nullopt : parse((*value)->text);
  if (!result)
    return typeError(key, expected, **value);
  return result;
}

FailureOr<std::optional<int64_t>> SpecMap::getInt(StringRef key) {
  return readScalar<int64_t>(key, "an integer",
                             [](StringRef text) -> std::optional<int64_t> {
                               int64_t result;
                               if (text.getAsInteger(10, result))
                                 return std::nullopt;
                               return result;
                             });
}

FailureOr<std::optional<llvm::SmallVector<int64_t>>>
SpecMap::getIntList(StringRef key, size_t size) {
  const SpecNode *value = getNode(key);
  if (!value || value->isNull())
    return std::optional<llvm::SmallVector<int64_t>>();
  std::string expected = llvm::formatv("a list of {0} integers", size).str();
  if (value->kind != SpecNode::Kind::List)
    return typeError(key, expected, *value);
  if (value->items.size() != size)
    return typeError(key, expected, *value) << " of " << value->items.size();
  llvm::SmallVector<int64_t> result;
  for (const std::unique_ptr<SpecNode> &item : value->items) {
    int64_t number;
    if (item->kind != SpecNode::Kind::Scalar || item->quoted ||
        StringRef(item->text).getAsInteger(10, number))
      return typeError(key, expected, *item);
    result.push_back(number);
  }
  return std::optional<llvm::SmallVector<int64_t>>(std::move(result));
}

FailureOr<std::optional<double>> SpecMap::getFloat(StringRef key) {
  return readScalar<double>(key, "a number",
                            [](StringRef text) -> std::optional<double> {
                              double result;
                              if (text.getAsDouble(result))
                                return std::nullopt;
                              return result;
                            });
}

FailureOr<std::optional<bool>> SpecMap::getBool(StringRef key) {
  return readScalar<bool>(key, "true or false",
                          [](StringRef text) -> std::optional<bool> {
                            if (text.equals_insensitive("true"))
                              return true;
                            if (text.equals_insensitive("false"))
                              return false;
                            return std::nullopt;
                          });
}

FailureOr<std::optional<std::string>> SpecMap::getString(StringRef key) {
  FailureOr<const SpecNode *> value = scalar(key, "a string");
  if (failed(value))
    return failure();
  if (!*value)
    return std::optional<std::string>();
  return std::optional<std::string>((*value)->text);
}

FailureOr<std::optional<std::string>>
SpecMap::getChoice(StringRef key, llvm::ArrayRef<StringRef> choices) {
  FailureOr<std::optional<std::string>> text = getString(key);
  if (failed(text) || !*text)
    return text;
  for (StringRef choice : choices)
    if (choice.equals_insensitive(**text))
      return std::optional<std::string>(choice.str());
  InFlightDiagnostic diag = emitError(valueLoc(key));
  diag << "'" << key << "' in " << what << " must be one of "
       << llvm::join(choices, ", ") << "; got '" << **text << "'";
  if (std::optional<StringRef> close = closestMatch(**text, choices))
    diag << " (did you mean '" << *close << "'?)";
  return diag;
}

FailureOr<int64_t> SpecMap::getInt(StringRef key, int64_t fallback) {
  FailureOr<std::optional<int64_t>> value = getInt(key);
  if (failed(value))
    return failure();
  return value->value_or(fallback);
}

FailureOr<double> SpecMap::getFloat(StringRef key, double fallback) {
  FailureOr<std::optional<double>> value = getFloat(key);
  if (failed(value))
    return failure();
  return value->value_or(fallback);
}

FailureOr<bool> SpecMap::getBool(StringRef key, bool fallback) {
  FailureOr<std::optional<bool>> value = getBool(key);
  if (failed(value))
    return failure();
  return value->value_or(fallback);
}

FailureOr<std::optional<int64_t>> SpecMap::getPositive(StringRef key) {
  FailureOr<std::optional<int64_t>> value = getInt(key);
  if (failed(value) || !*value)
    return value;
  if (**value < 1)
    return emitError(valueLoc(key))
           << "'" << key << "' in " << what << " must be >= 1, got " << **value;
  if (**value > kMaxSpecSize)
    return emitError(valueLoc(key))
           << "'" << key << "' in " << what << " must be <= " << kMaxSpecSize
           << " (2^30), got " << **value;
  return value;
}

FailureOr<int64_t> SpecMap::required(StringRef key,
                                     FailureOr<std::optional<int64_t>> value) {
  if (failed(value))
    return failure();
  if (!*value) {
    missing.push_back(key);
    return failure();
  }
  return **value;
}

FailureOr<int64_t> SpecMap::requireInt(StringRef key) {
  return required(key, getInt(key));
}

FailureOr<int64_t> SpecMap::requirePositive(StringRef key) {
  return required(key, getPositive(key));
}

llvm::SmallVector<const SpecEntry *> SpecMap::unknownEntries() const {
  llvm::SmallVector<const SpecEntry *> result;
  for (const SpecEntry &entry : node.entries)
    if (!llvm::is_contained(known, entry.key))
      result.push_back(&entry);
  return result;
}

void SpecMap::reportUnknown(const SpecEntry &entry,
                            llvm::ArrayRef<StringRef> candidates,
                            bool listValid) {
  InFlightDiagnostic diag = emitError(locations.get(entry.keyLoc));
  diag << "unknown key '" << entry.key << "' in " << what;
  if (std::optional<StringRef> close = closestMatch(entry.key, candidates))
    diag << "; did you mean '" << *close << "'?";
  else if (listValid)
    diag << " (valid keys: " << llvm::join(known, ", ") << ")";
}

LogicalResult SpecMap::finish() {
  llvm::SmallVector<const SpecEntry *> unknown = unknownEntries();
  // A missing required key is most often a misspelled one: report an unknown
  // key close to a missing one first, then any other unknown key.
  for (const SpecEntry *entry : unknown) {
    if (closestMatch(entry->key, missing)) {
      reportUnknown(*entry, missing, /*listValid=*/false);
      return failure();
    }
  }
  if (!unknown.empty()) {
    reportUnknown(*unknown.front(), known, /*listValid=*/true);
    return failure();
  }
  for (StringRef key : missing)
    emitError(loc()) << what << " needs '" << key << "'";
  return failure(!missing.empty());
}

LogicalResult SpecMap::checkMisspelled(StringRef key) {
  for (const SpecEntry *entry : unknownEntries()) {
    if (closestMatch(entry->key, key)) {
      reportUnknown(*entry, key, /*listValid=*/false);
      return failure();
    }
  }
  return success();
}
