//===- AttentionEngines.h - cuDNN engine configurations ---------*- C++ -*-===//
//
// The backend-API plumbing behind AttentionEngineConfig: what cuDNN's
// heuristics offer for an operation graph, which knobs an engine has, and a
// finalized engine configuration built from an (engine, knobs) choice.
// Attention.cpp turns configurations into execution plans.
//
//===----------------------------------------------------------------------===//
#ifndef TEJIT_RUNTIME_ATTENTIONENGINES_H
#define TEJIT_RUNTIME_ATTENTIONENGINES_H

#include "runtime/Attention.h"
#include "runtime/Cudnn.h"

#include <string>
#include <vector>

namespace tejit::runtime::attention {

/// The finalized configurations heuristics `mode` offers for `graph`, best
/// first. When the heuristics themselves refuse the graph, none, with the
/// reason appended to `tried`.
llvm::Expected<std::vector<BackendDescriptor>>
heuristicConfigs(const Cudnn &lib, cudnnBackendDescriptor_t graph,
                 cudnnBackendHeurMode_t mode, const char *modeName,
                 std::string &tried);

/// The engine and knob choices of a configuration heuristics returned.
llvm::Expected<AttentionEngineConfig>
readEngineConfig(const Cudnn &lib, cudnnBackendDescriptor_t config);

/// One knob of an engine: its cudnnBackendKnobType_t and the values it
/// takes, minimum to maximum in steps of stride.
struct KnobRange {
  int64_t type = 0, minimum = 0, maximum = 0, stride = 1;
};

/// The knobs of engine `engine` (global index) on `graph`; an error when the
/// engine does not finalize for the graph.
llvm::Expected<std::vector<KnobRange>>
engineKnobs(const Cudnn &lib, cudnnBackendDescriptor_t graph, int64_t engine);

/// How many engines cuDNN has for `graph` (global indices 0 to count - 1).
llvm::Expected<int64_t> engineCount(const Cudnn &lib,
                                    cudnnBackendDescriptor_t graph);

/// A finalized engine configuration of `config` for `graph`; an error naming
/// cuDNN's status when the engine or a knob value is refused.
llvm::Expected<BackendDescriptor>
buildEngineConfig(const Cudnn &lib, cudnnBackendDescriptor_t graph,
                  const AttentionEngineConfig &config);

} // namespace tejit::runtime::attention

#endif // TEJIT_RUNTIME_ATTENTIONENGINES_H
