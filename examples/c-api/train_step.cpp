//===- train_step.cpp - the tejit C API from a C++ program ----------------===//
//
// Compiles a layer spec for the GPU, fills its inputs and parameters with
// random data, and runs training steps: forward, backward, and the FP8
// scale updates. Then captures one step in a CUDA graph, replays it, and
// checks the replay gives the same bits as a direct step. Last, TE's FP8
// weight caching across micro-batches: a step that keeps its weight casts
// gives the direct step's bits, and the next one, which reuses them, skips
// the cast kernels and stays within FP8 noise of a step that casts; and
// the same decided by a device flag in one captured step. A spec with
// delay_wgrad_compute also runs the backward in its two halves.
//
//   tejit-train-step [SPEC]   (default: examples/layernorm_mlp_small.yaml)
//
//===----------------------------------------------------------------------===//
#include "tejit/tejit.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

namespace {
#define CHECK_TEJIT(call)                                                      \
  do {                                                                         \
    if (tejit_status status_ = (call); status_ != TEJIT_OK) {                  \
      std::fprintf(stderr, "%s failed (status %d): %s\n", #call, int(status_), \
                   tejit_last_error());                                        \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)
#define CHECK_CUDA(call)                                                       \
  do {                                                                         \
    if (cudaError_t error_ = (call); error_ != cudaSuccess) {                  \
      std::fprintf(stderr, "%s failed: %s\n", #call,                           \
                   cudaGetErrorString(error_));                                \
      std::exit(1);                                                            \
    }                                                                          \
  } while (0)

/// A device tensor of one program slot.
struct Tensor {
  tejit_tensor_info info;
  void *data = nullptr;
};

std::vector<Tensor> allocate(tejit_program *program, tejit_tensor_kind kind) {
  std::vector<Tensor> tensors(tejit_num_tensors(program, kind));
  for (size_t i = 0; i < tensors.size(); ++i) {
    CHECK_TEJIT(tejit_tensor_info_get(program, kind, i, &tensors[i].info));
    CHECK_CUDA(cudaMalloc(&tensors[i].data, tensors[i].info.bytes));
  }
  return tensors;
}

uint16_t toBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return uint16_t((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}

float fromBf16(uint16_t value) {
  uint32_t bits = uint32_t(value) << 16;
  float result;
  std::memcpy(&result, &bits, 4);
  return result;
}

/// Normal data with standard deviation `sigma`; bf16 tensors (the params
/// dtype of the example specs) and float32 ones (rotary tables: any angles
/// do for this example).
void fillRandom(const Tensor &tensor, float sigma, std::mt19937 &rng) {
  std::normal_distribution<float> normal(0.f, sigma);
  if (tensor.info.dtype == TEJIT_F32) {
    std::vector<float> host(tensor.info.bytes / 4);
    for (float &value : host)
      value = normal(rng);
    CHECK_CUDA(cudaMemcpy(tensor.data, host.data(), tensor.info.bytes,
                          cudaMemcpyHostToDevice));
    return;
  }
  if (tensor.info.dtype != TEJIT_BF16) {
    std::fprintf(stderr,
                 "this example fills bf16 and float32 tensors only ('%s')\n",
                 tensor.info.name);
    std::exit(1);
  }
  std::vector<uint16_t> host(tensor.info.bytes / 2);
  for (uint16_t &value : host)
    value = toBf16(normal(rng));
  CHECK_CUDA(cudaMemcpy(tensor.data, host.data(), tensor.info.bytes,
                        cudaMemcpyHostToDevice));
}

std::vector<uint16_t> download(const Tensor &tensor) {
  std::vector<uint16_t> host(tensor.info.bytes / 2);
  CHECK_CUDA(cudaMemcpy(host.data(), tensor.data, tensor.info.bytes,
                        cudaMemcpyDeviceToHost));
  return host;
}

/// ||a - b|| / ||b|| over bf16 values.
double relativeL2(const std::vector<uint16_t> &a,
                  const std::vector<uint16_t> &b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double x = fromBf16(a[i]), y = fromBf16(b[i]);
    diff += (x - y) * (x - y);
    norm += y * y;
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::vector<void *> pointers(const std::vector<Tensor> &tensors) {
  std::vector<void *> result;
  for (const Tensor &tensor : tensors)
    result.push_back(tensor.data);
  return result;
}
} // namespace

int main(int argc, char **argv) {
  const char *spec = argc > 1 ? argv[1] : "examples/layernorm_mlp_small.yaml";
  int major = 0, minor = 0;
  char name[128] = "";
  if (tejit_status status =
          tejit_device_info(0, &major, &minor, name, sizeof(name));
      status != TEJIT_OK) {
    std::fprintf(stderr, "tejit-train-step: cannot run here: %s\n",
                 tejit_last_error());
    return 1;
  }
  std::printf("device: %s (sm_%d%d), tejit %s\n", name, major, minor,
              tejit_version());

  tejit_compile_options options = {/*training=*/1, /*recipe=*/nullptr,
                                   /*device=*/0};
  tejit_program *program = nullptr;
  CHECK_TEJIT(tejit_compile(nullptr, spec, &options, &program));

  std::vector<Tensor> inputs = allocate(program, TEJIT_INPUT);
  std::vector<Tensor> outputs = allocate(program, TEJIT_OUTPUT);
  std::vector<Tensor> gradOutputs = allocate(program, TEJIT_GRAD_OUTPUT);
  std::vector<Tensor> gradInputs = allocate(program, TEJIT_GRAD_INPUT);
  std::mt19937 rng(42);
  for (const Tensor &tensor : inputs) {
    bool isNormWeight = std::strstr(tensor.info.name, "layer_norm_weight");
    bool isWeight = tensor.info.is_parameter && tensor.info.rank == 2;
    float sigma = isWeight ? 1.f / std::sqrt(float(tensor.info.shape[1]))
                  : tensor.info.is_parameter ? 0.1f
                                             : 1.f;
    fillRandom(tensor, sigma, rng);
    if (isNormWeight) { // around 1, as trained norms are
      std::vector<uint16_t> host = download(tensor);
      for (uint16_t &value : host)
        value = toBf16(1.f + fromBf16(value));
      CHECK_CUDA(cudaMemcpy(tensor.data, host.data(), tensor.info.bytes,
                            cudaMemcpyHostToDevice));
    }
  }
  for (const Tensor &tensor : gradOutputs)
    fillRandom(tensor, 1.f, rng);

  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  std::vector<void *> in = pointers(inputs), out = pointers(outputs),
                      dOut = pointers(gradOutputs), dIn = pointers(gradInputs);
  auto step = [&] {
    CHECK_TEJIT(tejit_forward(program, stream, in.data(), out.data()));
    CHECK_TEJIT(tejit_backward(program, stream, dOut.data(), dIn.data()));
  };
  for (int i = 0; i < 3; ++i)
    step();
  CHECK_CUDA(cudaStreamSynchronize(stream));

  // The FP8 state after three steps: scales left 1.0 once amaxes arrived.
  for (size_t i = 0; i < tejit_num_tensors(program, TEJIT_META); ++i) {
    tejit_tensor_info info;
    CHECK_TEJIT(tejit_tensor_info_get(program, TEJIT_META, i, &info));
    std::vector<float> values(info.bytes / 4);
    CHECK_TEJIT(tejit_meta_get(program, i, values.data(), info.bytes, stream));
    if (std::strstr(info.name, "amax_history"))
      continue;
    std::printf("%s:", info.name);
    for (float value : values)
      std::printf(" %g", value);
    std::printf("\n");
  }

  // Timing of direct steps.
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  const int iterations = 20;
  CHECK_CUDA(cudaEventRecord(start, stream));
  for (int i = 0; i < iterations; ++i)
    step();
  CHECK_CUDA(cudaEventRecord(stop, stream));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float directMs = 0;
  CHECK_CUDA(cudaEventElapsedTime(&directMs, start, stop));

  // One step captured in a CUDA graph. The graph and a direct step start
  // from the same FP8 state, so they must give the same bits.
  size_t numMeta = tejit_num_tensors(program, TEJIT_META);
  std::vector<std::vector<float>> state(numMeta);
  auto saveState = [&] {
    for (size_t i = 0; i < numMeta; ++i) {
      tejit_tensor_info info;
      CHECK_TEJIT(tejit_tensor_info_get(program, TEJIT_META, i, &info));
      state[i].resize(info.bytes / 4);
      CHECK_TEJIT(
          tejit_meta_get(program, i, state[i].data(), info.bytes, stream));
    }
  };
  // Dropout masks follow the RNG state: restart it with the FP8 state.
  const uint64_t seed = 2024;
  auto restoreState = [&] {
    for (size_t i = 0; i < numMeta; ++i)
      CHECK_TEJIT(tejit_meta_set(program, i, state[i].data(),
                                 state[i].size() * 4, stream));
    CHECK_TEJIT(tejit_set_seed(program, seed));
  };
  // One step captured and instantiated (the graph itself is not needed
  // after instantiation).
  auto captureStep = [&] {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    step();
    CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
    CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
    CHECK_CUDA(cudaGraphDestroy(graph));
    return exec;
  };
  saveState();
  CHECK_TEJIT(tejit_set_seed(program, seed));
  cudaGraphExec_t graphExec = captureStep();
  restoreState();
  step();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<std::vector<uint16_t>> direct;
  for (const Tensor &tensor : outputs)
    direct.push_back(download(tensor));
  for (const Tensor &tensor : gradInputs)
    direct.push_back(download(tensor));
  restoreState();
  CHECK_CUDA(cudaGraphLaunch(graphExec, stream));
  CHECK_CUDA(cudaStreamSynchronize(stream));
  size_t index = 0, mismatches = 0;
  for (const Tensor &tensor : outputs)
    mismatches += download(tensor) != direct[index++];
  for (const Tensor &tensor : gradInputs)
    mismatches += download(tensor) != direct[index++];

  CHECK_CUDA(cudaEventRecord(start, stream));
  for (int i = 0; i < iterations; ++i)
    CHECK_CUDA(cudaGraphLaunch(graphExec, stream));
  CHECK_CUDA(cudaEventRecord(stop, stream));
  CHECK_CUDA(cudaEventSynchronize(stop));
  float graphMs = 0;
  CHECK_CUDA(cudaEventElapsedTime(&graphMs, start, stop));

  // Weight casts kept across micro-batches (TE's is_first_microbatch=True,
  // then False), through the program's own saved tensors: the forward
  // copies the kept transposes there.
  auto results = [&] {
    std::vector<std::vector<uint16_t>> all;
    for (const Tensor &tensor : outputs)
      all.push_back(download(tensor));
    for (const Tensor &tensor : gradInputs)
      all.push_back(download(tensor));
    return all;
  };
  restoreState();
  CHECK_TEJIT(
      tejit_program_set_reuse_weight_casts(program, TEJIT_WEIGHT_CASTS_KEEP));
  step();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  size_t keepMismatches = results() != direct;
  saveState();
  CHECK_TEJIT(tejit_set_seed(program, seed));
  CHECK_TEJIT(tejit_program_set_reuse_weight_casts(
      program, TEJIT_WEIGHT_CASTS_REUSE_IN_GRAPHS));
  step();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  size_t skipped = tejit_program_skipped_steps(program);
  std::vector<std::vector<uint16_t>> reused = results();
  CHECK_TEJIT(
      tejit_program_set_reuse_weight_casts(program, TEJIT_WEIGHT_CASTS_RUN));
  restoreState();
  step();
  CHECK_CUDA(cudaStreamSynchronize(stream));
  std::vector<std::vector<uint16_t>> cast = results();
  double worst = 0;
  for (size_t i = 0; i < cast.size(); ++i)
    worst = std::max(worst, relativeL2(reused[i], cast[i]));
  bool cached = tejit_program_weight_cast_cache_bytes(program) > 0;
  bool cacheOk = !keepMismatches && (!cached || skipped > 0) && worst < 0.1;
  std::printf("weight casts kept: first micro-batch %s the direct step; the "
              "next skipped %zu steps, worst relative L2 %.4f against a step "
              "that casts (%s)\n",
              keepMismatches ? "DIFFERS from" : "matches", skipped, worst,
              cacheOk ? "ok" : "NOT OK");

  // The same decided on the device (TE's skip_fp8_weight_update): one
  // captured step serves both kinds of micro-batch, a device int saying
  // whether its weight casts run (0) or reuse the kept ones (1). To see the
  // casts skipped, a weight is zeroed before the reusing replay: that step
  // must still give the direct step's bits (it reads the casts of the old
  // weight), where a step that casts gives others. Programs without weight
  // casts to keep (no FP8) have no flag mode.
  bool flagOk = true;
  if (cached) {
    void *castFlag = nullptr;
    CHECK_CUDA(cudaMalloc(&castFlag, sizeof(int)));
    auto setFlag = [&](int value) {
      CHECK_CUDA(cudaMemcpyAsync(castFlag, &value, sizeof(int),
                                 cudaMemcpyHostToDevice, stream));
      CHECK_CUDA(cudaStreamSynchronize(stream)); // `value` is on the stack
    };
    CHECK_TEJIT(tejit_program_set_weight_cast_flag(program, castFlag));
    cudaGraphExec_t flagExec = captureStep();
    restoreState();
    setFlag(0);
    CHECK_CUDA(cudaGraphLaunch(flagExec, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    bool castMatches = results() == direct;
    const Tensor *weight = nullptr;
    for (const Tensor &tensor : inputs)
      if (!weight && tensor.info.is_parameter && tensor.info.rank == 2)
        weight = &tensor;
    std::vector<uint16_t> weightValues = download(*weight);
    CHECK_CUDA(cudaMemset(weight->data, 0, weight->info.bytes));
    restoreState();
    setFlag(1);
    CHECK_CUDA(cudaGraphLaunch(flagExec, stream));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    bool reuseMatches = results() == direct;
    CHECK_TEJIT(
        tejit_program_set_reuse_weight_casts(program, TEJIT_WEIGHT_CASTS_RUN));
    restoreState();
    step();
    CHECK_CUDA(cudaStreamSynchronize(stream));
    bool castingDiffers = results() != direct;
    CHECK_CUDA(cudaMemcpy(weight->data, weightValues.data(), weight->info.bytes,
                          cudaMemcpyHostToDevice));
    restoreState();
    step(); // the outputs of the real weights again, for the summary below
    CHECK_CUDA(cudaStreamSynchronize(stream));
    flagOk = castMatches && reuseMatches && castingDiffers;
    std::printf("weight casts by a device flag, one CUDA graph: flag 0 %s the "
                "direct step; with %s zeroed, flag 1 %s it (the kept casts), "
                "a step that casts %s (%s)\n",
                castMatches ? "matches" : "DIFFERS from", weight->info.name,
                reuseMatches ? "still matches" : "DIFFERS from",
                castingDiffers ? "differs" : "DOES NOT differ",
                flagOk ? "ok" : "NOT OK");
    CHECK_CUDA(cudaGraphExecDestroy(flagExec));
    CHECK_CUDA(cudaFree(castFlag));
  }

  // delay_wgrad_compute (docs/delay-wgrad.md): the backward's two halves,
  // with the saved and deferred tensors in this program's memory, give the
  // bits of a backward that runs both.
  bool halvesOk = true;
  if (tejit_delays_wgrad(program)) {
    std::vector<Tensor> saved = allocate(program, TEJIT_SAVED);
    std::vector<Tensor> deferred = allocate(program, TEJIT_DEFERRED);
    std::vector<void *> kept = pointers(saved), handed = pointers(deferred);
    restoreState();
    step();
    CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<std::vector<uint16_t>> whole = results();
    restoreState();
    CHECK_TEJIT(
        tejit_forward_ex(program, stream, in.data(), out.data(), kept.data()));
    CHECK_TEJIT(tejit_backward_dgrad_ex(program, stream, in.data(), out.data(),
                                        kept.data(), dOut.data(), dIn.data(),
                                        handed.data()));
    CHECK_TEJIT(tejit_backward_wgrad_ex(program, stream, in.data(), out.data(),
                                        kept.data(), dOut.data(), dIn.data(),
                                        handed.data()));
    CHECK_CUDA(cudaStreamSynchronize(stream));
    halvesOk = results() == whole;
    std::printf("delayed weight gradients: %zu deferred tensors; dgrad then "
                "wgrad %s the whole backward (%s)\n",
                deferred.size(), halvesOk ? "matches" : "DIFFERS from",
                halvesOk ? "ok" : "NOT OK");
    for (std::vector<Tensor> *list : {&saved, &deferred})
      for (const Tensor &tensor : *list)
        CHECK_CUDA(cudaFree(tensor.data));
  }

  std::vector<uint16_t> output = download(outputs[0]);
  double sum = 0;
  bool finite = true;
  for (uint16_t value : output) {
    sum += std::fabs(fromBf16(value));
    finite &= std::isfinite(fromBf16(value));
  }
  std::printf("output mean |y| = %.4f (%s); step %.3f ms direct, %.3f ms as "
              "a CUDA graph; graph replay %s the direct step\n",
              sum / output.size(), finite ? "finite" : "NOT FINITE",
              directMs / iterations, graphMs / iterations,
              mismatches ? "DIFFERS from" : "matches");
  CHECK_CUDA(cudaGraphExecDestroy(graphExec));
  tejit_program_destroy(program);
  return finite && !mismatches && cacheOk && flagOk && halvesOk ? 0 : 1;
}
