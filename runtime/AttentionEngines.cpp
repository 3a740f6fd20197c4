//===- AttentionEngines.cpp - cuDNN engine configurations -----------------===//
//
// cuDNN's backend API hands descriptor arrays out by filling descriptors the
// caller created: readArray counts, creates and fills. Knob types travel as
// cudnnBackendKnobType_t and are kept as int64 in AttentionEngineConfig.
//
//===----------------------------------------------------------------------===//
#include "runtime/AttentionEngines.h"

#include "llvm/Support/FormatVariadic.h"

using namespace tejit::runtime;
using namespace tejit::runtime::attention;
using llvm::Error;
using llvm::Expected;

namespace {
/// The descriptors of array attribute `name` of `desc`, each of `type`.
Expected<std::vector<BackendDescriptor>>
readArray(const Cudnn &lib, cudnnBackendDescriptor_t desc,
          cudnnBackendAttributeName_t name, cudnnBackendDescriptorType_t type,
          const char *what) {
  int64_t count = 0;
  if (cudnnStatus_t status = lib.cudnnBackendGetAttribute(
          desc, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr))
    return lib.error(status, llvm::Twine("counting the ") + what);
  std::vector<BackendDescriptor> owned;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    auto element = BackendDescriptor::create(lib, type, what);
    if (!element)
      return element.takeError();
    raw.push_back(element->get());
    owned.push_back(std::move(*element));
  }
  int64_t returned = 0;
  if (count > 0)
    if (cudnnStatus_t status = lib.cudnnBackendGetAttribute(
            desc, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &returned,
            raw.data()))
      return lib.error(status, llvm::Twine("reading the ") + what);
  owned.resize(static_cast<size_t>(std::min(returned, count)));
  return std::move(owned);
}

Expected<int64_t> readInt64(const Cudnn &lib, cudnnBackendDescriptor_t desc,
                            cudnnBackendAttributeName_t name,
                            const char *what) {
  int64_t value = 0, count = 0;
  if (cudnnStatus_t status = lib.cudnnBackendGetAttribute(
          desc, name, CUDNN_TYPE_INT64, 1, &count, &value))
    return lib.error(status, llvm::Twine("reading ") + what);
  return value;
}

Expected<int64_t> readKnobType(const Cudnn &lib, cudnnBackendDescriptor_t desc,
                               cudnnBackendAttributeName_t name) {
  cudnnBackendKnobType_t type = CUDNN_KNOB_TYPE_COUNTS;
  int64_t count = 0;
  if (cudnnStatus_t status = lib.cudnnBackendGetAttribute(
          desc, name, CUDNN_TYPE_KNOB_TYPE, 1, &count, &type))
    return lib.error(status, "reading a knob's type");
  return static_cast<int64_t>(type);
}

/// A finalized engine descriptor: engine `engine` of `graph`.
Expected<BackendDescriptor>
buildEngine(const Cudnn &lib, cudnnBackendDescriptor_t graph, int64_t engine) {
  auto desc =
      BackendDescriptor::create(lib, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
  if (!desc)
    return desc.takeError();
  std::string what = llvm::formatv("engine {0}", engine).str();
  if (Error error =
          lib.check(lib.cudnnBackendSetAttribute(
                        desc->get(), CUDNN_ATTR_ENGINE_OPERATION_GRAPH,
                        CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph),
                    "setting the operation graph of " + what))
    return std::move(error);
  if (Error error = lib.check(lib.cudnnBackendSetAttribute(
                                  desc->get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                  CUDNN_TYPE_INT64, 1, &engine),
                              "setting the global index of " + what))
    return std::move(error);
  if (cudnnStatus_t status = lib.cudnnBackendFinalize(desc->get()))
    return lib.error(status, "finalizing " + what, ErrorCode::Unsupported);
  return std::move(*desc);
}

Expected<BackendDescriptor> buildKnobChoice(const Cudnn &lib, int64_t type,
                                            int64_t value) {
  auto desc = BackendDescriptor::create(
      lib, CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, "knob choice");
  if (!desc)
    return desc.takeError();
  auto knobType = static_cast<cudnnBackendKnobType_t>(type);
  std::string what = llvm::formatv("knob {0} = {1}", type, value).str();
  if (Error error = lib.check(lib.cudnnBackendSetAttribute(
                                  desc->get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE,
                                  CUDNN_TYPE_KNOB_TYPE, 1, &knobType),
                              "setting " + what))
    return std::move(error);
  if (Error error =
          lib.check(lib.cudnnBackendSetAttribute(
                        desc->get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE,
                        CUDNN_TYPE_INT64, 1, &value),
                    "setting " + what))
    return std::move(error);
  if (cudnnStatus_t status = lib.cudnnBackendFinalize(desc->get()))
    return lib.error(status, "finalizing " + what, ErrorCode::Unsupported);
  return std::move(*desc);
}
} // namespace

Expected<std::vector<BackendDescriptor>>
attention::heuristicConfigs(const Cudnn &lib, cudnnBackendDescriptor_t graph,
                            cudnnBackendHeurMode_t mode, const char *modeName,
                            std::string &tried) {
  auto heuristic = BackendDescriptor::create(
      lib, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "engine heuristics");
  if (!heuristic)
    return heuristic.takeError();
  if (cudnnStatus_t status = lib.cudnnBackendSetAttribute(
          heuristic->get(), CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph))
    return lib.error(status, "setting the heuristics' operation graph");
  if (cudnnStatus_t status = lib.cudnnBackendSetAttribute(
          heuristic->get(), CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1,
          &mode))
    return lib.error(status, "setting the heuristics mode");
  if (cudnnStatus_t status = lib.cudnnBackendFinalize(heuristic->get())) {
    tried += llvm::formatv("\n  heuristics mode {0}: {1}: {2}", modeName,
                           lib.statusText(status), lib.lastErrorString());
    return std::vector<BackendDescriptor>();
  }
  auto configs =
      readArray(lib, heuristic->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "heuristics' results");
  if (configs && configs->empty())
    tried += llvm::formatv("\n  heuristics mode {0}: no engine configuration",
                           modeName);
  return configs;
}

Expected<AttentionEngineConfig>
attention::readEngineConfig(const Cudnn &lib, cudnnBackendDescriptor_t config) {
  AttentionEngineConfig result;
  auto engine =
      BackendDescriptor::create(lib, CUDNN_BACKEND_ENGINE_DESCRIPTOR, "engine");
  if (!engine)
    return engine.takeError();
  cudnnBackendDescriptor_t raw = engine->get();
  int64_t count = 0;
  if (cudnnStatus_t status = lib.cudnnBackendGetAttribute(
          config, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
          &count, &raw))
    return lib.error(status, "reading a configuration's engine");
  Expected<int64_t> index = readInt64(lib, raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
                                      "an engine's global index");
  if (!index)
    return index.takeError();
  result.engine = *index;
  auto choices = readArray(lib, config, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                           CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR,
                           "configuration's knob choices");
  if (!choices)
    return choices.takeError();
  for (const BackendDescriptor &choice : *choices) {
    Expected<int64_t> type =
        readKnobType(lib, choice.get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE);
    if (!type)
      return type.takeError();
    Expected<int64_t> value = readInt64(
        lib, choice.get(), CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, "a knob's value");
    if (!value)
      return value.takeError();
    result.knobs.emplace_back(*type, *value);
  }
  return result;
}

Expected<std::vector<KnobRange>>
attention::engineKnobs(const Cudnn &lib, cudnnBackendDescriptor_t graph,
                       int64_t engine) {
  Expected<BackendDescriptor> desc = buildEngine(lib, graph, engine);
  if (!desc)
    return desc.takeError();
  auto infos = readArray(lib, desc->get(), CUDNN_ATTR_ENGINE_KNOB_INFO,
                         CUDNN_BACKEND_KNOB_INFO_DESCRIPTOR, "engine's knobs");
  if (!infos)
    return infos.takeError();
  std::vector<KnobRange> knobs;
  for (const BackendDescriptor &info : *infos) {
    KnobRange knob;
    Expected<int64_t> type =
        readKnobType(lib, info.get(), CUDNN_ATTR_KNOB_INFO_TYPE);
    if (!type)
      return type.takeError();
    knob.type = *type;
    for (auto [field, name, what] :
         {std::tuple{&knob.minimum, CUDNN_ATTR_KNOB_INFO_MINIMUM_VALUE,
                     "a knob's minimum"},
          std::tuple{&knob.maximum, CUDNN_ATTR_KNOB_INFO_MAXIMUM_VALUE,
                     "a knob's maximum"},
          std::tuple{&knob.stride, CUDNN_ATTR_KNOB_INFO_STRIDE,
                     "a knob's stride"}}) {
      Expected<int64_t> value = readInt64(lib, info.get(), name, what);
      if (!value)
        return value.takeError();
      *field = *value;
    }
    knobs.push_back(knob);
  }
  return knobs;
}

Expected<int64_t> attention::engineCount(const Cudnn &lib,
                                         cudnnBackendDescriptor_t graph) {
  return readInt64(lib, graph, CUDNN_ATTR_OPERATIONGRAPH_ENGINE_GLOBAL_COUNT,
                   "the operation graph's engine count");
}

Expected<BackendDescriptor>
attention::buildEngineConfig(const Cudnn &lib, cudnnBackendDescriptor_t graph,
                             const AttentionEngineConfig &config) {
  Expected<BackendDescriptor> engine = buildEngine(lib, graph, config.engine);
  if (!engine)
    return engine.takeError();
  std::vector<BackendDescriptor> choices;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (auto [type, value] : config.knobs) {
    Expected<BackendDescriptor> choice = buildKnobChoice(lib, type, value);
    if (!choice)
      return choice.takeError();
    raw.push_back(choice->get());
    choices.push_back(std::move(*choice));
  }
  auto desc = BackendDescriptor::create(lib, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
                                        "engine configuration");
  if (!desc)
    return desc.takeError();
  cudnnBackendDescriptor_t engineRaw = engine->get();
  if (Error error = lib.check(lib.cudnnBackendSetAttribute(
                                  desc->get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &engineRaw),
                              "setting the configuration's engine"))
    return std::move(error);
  if (!raw.empty())
    if (Error error =
            lib.check(lib.cudnnBackendSetAttribute(
                          desc->get(), CUDNN_ATTR_ENGINECFG_KNOB_CHOICES,
                          CUDNN_TYPE_BACKEND_DESCRIPTOR,
                          static_cast<int64_t>(raw.size()), raw.data()),
                      "setting the configuration's knob choices"))
      return std::move(error);
  if (cudnnStatus_t status = lib.cudnnBackendFinalize(desc->get()))
    return lib.error(status, "finalizing the configuration " + config.str(),
                     ErrorCode::Unsupported);
  return std::move(*desc);
}
