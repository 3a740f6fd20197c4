//===- GemmTuning.cpp - measured cuBLASLt algorithms per GEMM -------------===//
#include "runtime/GemmTuning.h"
#include "runtime/Errors.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

using namespace tejit::runtime;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;
namespace json = llvm::json;

namespace {

constexpr StringRef formatName = "tejit-gemm-tuning";
constexpr int64_t formatVersion = 1;

/// The algorithm's fields, in the file's order and spelling.
template <typename Config, typename Visit>
void forEachField(Config &config, Visit visit) {
  using L = llvm::StringLiteral;
  visit(L("id"), config.id);
  visit(L("tile"), config.tile);
  visit(L("stages"), config.stages);
  visit(L("split_k"), config.splitK);
  visit(L("reduction"), config.reduction);
  visit(L("swizzle"), config.swizzle);
  visit(L("custom"), config.custom);
  visit(L("cluster"), config.cluster);
  visit(L("inner"), config.inner);
}

bool mapFp8Type(const json::Object &object, StringRef key, ElementType &type,
                json::Path path) {
  const json::Value *value = object.get(key);
  if (!value) {
    path.field(key).report("missing");
    return false;
  }
  std::optional<StringRef> name = value->getAsString();
  std::optional<ElementType> parsed =
      name ? parseElementType(*name) : std::nullopt;
  if (!parsed || !isFp8(*parsed)) {
    path.field(key).report("expected \"f8E4M3FN\" or \"f8E5M2\"");
    return false;
  }
  type = *parsed;
  return true;
}

/// An optional "a_scaling" / "b_scaling": Tensor when absent.
bool mapScaling(const json::Object &object, StringRef key, GemmScaling &scaling,
                json::Path path) {
  scaling = GemmScaling::Tensor;
  const json::Value *value = object.get(key);
  if (!value)
    return true;
  std::optional<StringRef> name = value->getAsString();
  std::optional<GemmScaling> parsed =
      name ? parseGemmScaling(*name) : std::nullopt;
  if (!parsed) {
    path.field(key).report("expected \"tensor\", \"block_1d\" or \"block_2d\"");
    return false;
  }
  scaling = *parsed;
  return true;
}
} // namespace

// json::ObjectMapper finds these by argument-dependent lookup.
namespace tejit::runtime {
bool fromJSON(const json::Value &value, AlgoConfig &config, json::Path path) {
  json::ObjectMapper mapper(value, path);
  bool ok = bool(mapper);
  forEachField(config, [&](llvm::StringLiteral name, int64_t &field) {
    ok = ok && mapper.map(name, field);
  });
  return ok;
}

bool fromJSON(const json::Value &value, TunedGemm &gemm, json::Path path) {
  json::ObjectMapper mapper(value, path);
  if (!mapper || !mapper.map("m", gemm.m) || !mapper.map("n", gemm.n) ||
      !mapper.map("k", gemm.k) || !mapper.map("fast_accum", gemm.fastAccum) ||
      !mapper.map("algo", gemm.algo) ||
      !mapper.mapOptional("heuristic_ms", gemm.heuristicMs) ||
      !mapper.mapOptional("tuned_ms", gemm.tunedMs))
    return false;
  const json::Object &object = *value.getAsObject();
  if (!mapFp8Type(object, "a", gemm.a, path) ||
      !mapFp8Type(object, "b", gemm.b, path) ||
      !mapScaling(object, "a_scaling", gemm.aScaling, path) ||
      !mapScaling(object, "b_scaling", gemm.bScaling, path))
    return false;
  for (auto [name, size] :
       {std::pair{"m", gemm.m}, std::pair{"n", gemm.n}, std::pair{"k", gemm.k}})
    if (size <= 0) {
      path.field(name).report("must be positive");
      return false;
    }
  if (gemm.a == ElementType::F8E5M2 && gemm.b == ElementType::F8E5M2) {
    path.field("b").report("E5M2 x E5M2 is not an FP8 GEMM cuBLASLt runs");
    return false;
  }
  return true;
}
} // namespace tejit::runtime

std::string AlgoConfig::describe() const {
  std::string text;
  forEachField(*this, [&](StringRef name, const int64_t &field) {
    text += llvm::formatv("{0}{1} {2}", text.empty() ? "" : " ",
                          name == "id" ? "algo" : name, field)
                .str();
  });
  return text;
}

Expected<GemmTuning> GemmTuning::parse(StringRef text, StringRef source) {
  auto fail = [&](const llvm::Twine &why) {
    return makeError(ErrorCode::InvalidArgument,
                     "GEMM tuning file " + source + ": " + why);
  };
  Expected<json::Value> document = json::parse(text);
  if (!document)
    return fail(llvm::toString(document.takeError()));
  GemmTuning tuning;
  std::string format;
  int64_t version = 0;
  json::Path::Root root("the file");
  json::ObjectMapper mapper(*document, root);
  if (!mapper || !mapper.map("format", format) ||
      !mapper.map("version", version) || !mapper.map("device", tuning.device) ||
      !mapper.map("cublaslt", tuning.cublasLt) ||
      !mapper.map("gemms", tuning.gemms))
    return fail(llvm::toString(root.getError()));
  if (format != formatName)
    return fail("\"format\" is \"" + format + "\", expected \"" + formatName +
                "\"");
  if (version != formatVersion)
    return fail(llvm::formatv("\"version\" is {0}; version {1} is read",
                              version, formatVersion));
  return tuning;
}

Expected<GemmTuning> GemmTuning::load(StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return makeError(ErrorCode::InvalidArgument,
                     "cannot read the GEMM tuning file " + path + ": " +
                         buffer.getError().message());
  return parse((*buffer)->getBuffer(), path);
}

void GemmTuning::write(llvm::raw_ostream &os) const {
  json::OStream out(os, 2);
  out.object([&] {
    out.attribute("format", formatName);
    out.attribute("version", formatVersion);
    out.attribute("device", device);
    out.attribute("cublaslt", cublasLt);
    out.attributeArray("gemms", [&] {
      for (const TunedGemm &gemm : gemms)
        out.object([&] {
          out.attribute("m", gemm.m);
          out.attribute("n", gemm.n);
          out.attribute("k", gemm.k);
          out.attribute("a", elementTypeName(gemm.a));
          out.attribute("b", elementTypeName(gemm.b));
          out.attribute("fast_accum", gemm.fastAccum);
          // Written for block scales only: files stay as they were.
          if (gemm.aScaling != GemmScaling::Tensor ||
              gemm.bScaling != GemmScaling::Tensor) {
            out.attribute("a_scaling", gemmScalingName(gemm.aScaling));
            out.attribute("b_scaling", gemmScalingName(gemm.bScaling));
          }
          out.attributeObject("algo", [&] {
            forEachField(gemm.algo, [&](StringRef name, const int64_t &v) {
              out.attribute(name, v);
            });
          });
          out.attribute("heuristic_ms", gemm.heuristicMs);
          out.attribute("tuned_ms", gemm.tunedMs);
        });
    });
  });
  os << "\n";
}

const TunedGemm *GemmTuning::find(int64_t m, int64_t n, int64_t k,
                                  ElementType a, ElementType b, bool fastAccum,
                                  GemmScaling aScaling,
                                  GemmScaling bScaling) const {
  for (const TunedGemm &gemm : gemms)
    if (gemm.m == m && gemm.n == n && gemm.k == k && gemm.a == a &&
        gemm.b == b && gemm.fastAccum == fastAccum &&
        gemm.aScaling == aScaling && gemm.bScaling == bScaling)
      return &gemm;
  return nullptr;
}

std::string GemmTuning::mismatch(StringRef deviceName,
                                 StringRef cublasLtVersion) const {
  if (device != deviceName)
    return "it was measured on " + device + ", this is " + deviceName.str();
  if (cublasLt != cublasLtVersion)
    return "it was measured with cuBLASLt " + cublasLt + ", this is " +
           cublasLtVersion.str();
  return "";
}
