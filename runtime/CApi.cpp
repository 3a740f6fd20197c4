//===- CApi.cpp - the C API (include/tejit/tejit.h) -----------------------===//
//
// Every entry point catches its llvm::Error, turns its code into a status
// and keeps the message for tejit_last_error() on this thread.
//
//===----------------------------------------------------------------------===//
#include "tejit/tejit.h"

#include "codegen/BuildId.h"
#include "runtime/AmaxReducer.h"
#include "runtime/Compile.h"
#include "runtime/Program.h"
#include "runtime/TensorParallel.h"

#include "llvm/Support/FormatVariadic.h"

#include <cstring>

using namespace tejit::runtime;

struct tejit_program {
  std::unique_ptr<Program> program;
};

struct tejit_amax_group {
  std::shared_ptr<AmaxReducer> reducer;
};

struct tejit_tp_group {
  std::shared_ptr<TensorParallelGroup> group;
};

static_assert(TEJIT_AMAX_GROUP_ID_BYTES == sizeof(ncclUniqueId),
              "an amax group id is an NCCL unique id");
// The tejit_tp_*_fn functions are given int(ElementType) as their dtype
// (TensorParallel.h).
static_assert(int(ElementType::F32) == TEJIT_F32 &&
                  int(ElementType::F16) == TEJIT_F16 &&
                  int(ElementType::BF16) == TEJIT_BF16,
              "ElementType and tejit_dtype disagree");

// tejit_status mirrors ErrorCode (runtime/Errors.h): fail() casts one into
// the other.
static_assert(int(ErrorCode::InvalidArgument) == TEJIT_ERROR_INVALID_ARGUMENT &&
                  int(ErrorCode::Compile) == TEJIT_ERROR_COMPILE &&
                  int(ErrorCode::NoDevice) == TEJIT_ERROR_NO_DEVICE &&
                  int(ErrorCode::UnsupportedDevice) ==
                      TEJIT_ERROR_UNSUPPORTED_DEVICE &&
                  int(ErrorCode::Cuda) == TEJIT_ERROR_CUDA &&
                  int(ErrorCode::Cublas) == TEJIT_ERROR_CUBLAS &&
                  int(ErrorCode::Unsupported) == TEJIT_ERROR_UNSUPPORTED &&
                  int(ErrorCode::State) == TEJIT_ERROR_STATE &&
                  int(ErrorCode::Internal) == TEJIT_ERROR_INTERNAL,
              "ErrorCode and tejit_status disagree");
static_assert(int(TensorKind::Input) == TEJIT_INPUT &&
                  int(TensorKind::Output) == TEJIT_OUTPUT &&
                  int(TensorKind::GradOutput) == TEJIT_GRAD_OUTPUT &&
                  int(TensorKind::GradInput) == TEJIT_GRAD_INPUT &&
                  int(TensorKind::Meta) == TEJIT_META &&
                  int(TensorKind::Saved) == TEJIT_SAVED &&
                  int(TensorKind::Deferred) == TEJIT_DEFERRED,
              "TensorKind and tejit_tensor_kind disagree");

namespace {
thread_local std::string lastError;

tejit_status fail(ErrorCode code, std::string message) {
  lastError = std::move(message);
  return static_cast<tejit_status>(code);
}

tejit_status fail(llvm::Error error, ErrorCode fallback = ErrorCode::Internal) {
  std::string message;
  ErrorCode code = takeError(std::move(error), message, fallback);
  return fail(code, std::move(message));
}

tejit_status ok() {
  lastError.clear();
  return TEJIT_OK;
}

tejit_status invalid(const std::string &message) {
  return fail(ErrorCode::InvalidArgument, message);
}

std::optional<CompileInput> input(const char *source, const char *path) {
  if (source)
    return CompileInput{source, path ? path : ""};
  if (path)
    return CompileInput{"", path};
  return std::nullopt;
}

tejit_dtype dtypeOf(ElementType type) {
  switch (type) {
  case ElementType::F32:
    return TEJIT_F32;
  case ElementType::F16:
    return TEJIT_F16;
  case ElementType::BF16:
    return TEJIT_BF16;
  case ElementType::F8E4M3:
    return TEJIT_F8E4M3;
  case ElementType::F8E5M2:
    return TEJIT_F8E5M2;
  case ElementType::I64:
    return TEJIT_I64;
  case ElementType::I32:
    return TEJIT_I32;
  case ElementType::I8:
    return TEJIT_I8;
  case ElementType::I1:
    return TEJIT_BOOL;
  }
  return TEJIT_I8;
}

/// A handle (tejit_amax_group or tejit_tp_group) of a `Group` over `comm`.
template <typename Group, typename Handle>
tejit_status newNcclGroup(llvm::Expected<std::unique_ptr<NcclComm>> comm,
                          Handle **handle) {
  if (!comm)
    return fail(comm.takeError());
  *handle = new Handle{std::make_shared<Group>(std::move(*comm))};
  return ok();
}

ncclUniqueId ncclId(const unsigned char id[TEJIT_AMAX_GROUP_ID_BYTES]) {
  ncclUniqueId unique;
  std::memcpy(&unique, id, sizeof(unique));
  return unique;
}

template <typename T>
std::vector<CUdeviceptr> pointers(T *const *array, size_t count) {
  std::vector<CUdeviceptr> result;
  for (size_t i = 0; i < count; ++i)
    result.push_back(reinterpret_cast<CUdeviceptr>(array[i]));
  return result;
}
} // namespace

extern "C" {

const char *tejit_last_error(void) { return lastError.c_str(); }

const char *tejit_version(void) {
  static const std::string id = tejit::buildId().str();
  return id.c_str();
}

tejit_status tejit_device_info(int ordinal, int *major, int *minor, char *name,
                               size_t name_size) {
  auto info = useDevice(ordinal);
  if (!info) {
    // Describe an unsupported device too, so callers can print it.
    if (auto described = describeDevice(ordinal)) {
      if (major)
        *major = described->major;
      if (minor)
        *minor = described->minor;
    } else {
      llvm::consumeError(described.takeError());
    }
    return fail(info.takeError());
  }
  if (major)
    *major = info->major;
  if (minor)
    *minor = info->minor;
  if (name && name_size) {
    std::strncpy(name, info->name.c_str(), name_size - 1);
    name[name_size - 1] = '\0';
  }
  return ok();
}

tejit_status tejit_compile(const char *source, const char *path,
                           const tejit_compile_options *options,
                           tejit_program **program) {
  if (!program)
    return invalid("tejit_compile: program is null");
  *program = nullptr;
  auto in = input(source, path);
  if (!in)
    return invalid("tejit_compile: give a source text or a path");
  int ordinal = options ? options->device : 0;
  // The device first: it decides the arch, and a machine without a GPU
  // should hear so before any compile work.
  auto device = useDevice(ordinal);
  if (!device)
    return fail(device.takeError());
  CompileOptions compileOptions;
  compileOptions.training = options ? options->training != 0 : true;
  compileOptions.recipe = options && options->recipe ? options->recipe : "";
  compileOptions.arch = device->arch;
  auto bundle = compileBundle(*in, compileOptions);
  if (!bundle)
    return fail(bundle.takeError(), ErrorCode::Compile);
  auto made = Program::create(std::move(*bundle), ordinal);
  if (!made)
    return fail(made.takeError());
  *program = new tejit_program{std::move(*made)};
  return ok();
}

tejit_status tejit_load_bundle(const char *dir, int device,
                               tejit_program **program) {
  if (!program || !dir)
    return invalid("tejit_load_bundle: dir and program must not be null");
  *program = nullptr;
  auto bundle = loadBundle(dir);
  if (!bundle)
    return fail(bundle.takeError(), ErrorCode::InvalidArgument);
  auto made = Program::create(std::move(*bundle), device);
  if (!made)
    return fail(made.takeError());
  *program = new tejit_program{std::move(*made)};
  return ok();
}

void tejit_program_destroy(tejit_program *program) { delete program; }

tejit_status tejit_compile_ir(const char *source, const char *path,
                              const tejit_compile_options *options,
                              const char *stage, char **text) {
  if (!text || !stage)
    return invalid("tejit_compile_ir: stage and text must not be null");
  *text = nullptr;
  auto in = input(source, path);
  if (!in)
    return invalid("tejit_compile_ir: give a source text or a path");
  CompileOptions compileOptions;
  compileOptions.training = options ? options->training != 0 : true;
  compileOptions.recipe = options && options->recipe ? options->recipe : "";
  auto result = compileToText(*in, compileOptions, stage);
  if (!result)
    return fail(result.takeError(), ErrorCode::Compile);
  *text = strdup(result->c_str());
  return ok();
}

void tejit_free_string(char *text) { free(text); }

tejit_status tejit_program_plan(const tejit_program *program, char **text) {
  if (!program || !text)
    return invalid("tejit_program_plan: program and text must not be null");
  *text = strdup(program->program->planText().c_str());
  return ok();
}

size_t tejit_num_tensors(const tejit_program *program, tejit_tensor_kind kind) {
  if (!program || kind < TEJIT_INPUT || kind > TEJIT_DEFERRED)
    return 0;
  return program->program->tensors(static_cast<TensorKind>(kind)).size();
}

tejit_status tejit_tensor_info_get(const tejit_program *program,
                                   tejit_tensor_kind kind, size_t index,
                                   tejit_tensor_info *info) {
  if (!program || !info || kind < TEJIT_INPUT || kind > TEJIT_DEFERRED)
    return invalid("tejit_tensor_info_get: null program/info or bad kind");
  const auto &list = program->program->tensors(static_cast<TensorKind>(kind));
  if (index >= list.size())
    return invalid("tejit_tensor_info_get: index " + std::to_string(index) +
                   " out of range (" + std::to_string(list.size()) +
                   " tensors)");
  const TensorDesc &desc = list[index];
  if (desc.type.shape.size() > 8)
    return fail(ErrorCode::Unsupported,
                "tensor '" + desc.name + "' has rank above 8");
  info->name = desc.name.c_str();
  info->dtype = dtypeOf(desc.type.element);
  info->rank = static_cast<int>(desc.type.shape.size());
  for (size_t i = 0; i < 8; ++i)
    info->shape[i] = i < desc.type.shape.size() ? desc.type.shape[i] : 0;
  info->bytes = static_cast<size_t>(desc.type.bytes());
  info->is_parameter = desc.parameter;
  return ok();
}

int tejit_tensor_is_host(const tejit_program *program, tejit_tensor_kind kind,
                         size_t index) {
  if (!program || kind < TEJIT_INPUT || kind > TEJIT_DEFERRED)
    return 0;
  const auto &list = program->program->tensors(static_cast<TensorKind>(kind));
  return index < list.size() && list[index].host;
}

int tejit_is_training(const tejit_program *program) {
  return program && program->program->training();
}

tejit_status tejit_forward(tejit_program *program, void *stream,
                           const void *const *inputs, void *const *outputs) {
  if (!program)
    return invalid("tejit_forward: program is null");
  size_t numInputs = tejit_num_tensors(program, TEJIT_INPUT);
  size_t numOutputs = tejit_num_tensors(program, TEJIT_OUTPUT);
  if ((numInputs && !inputs) || (numOutputs && !outputs))
    return invalid("tejit_forward: inputs and outputs must not be null");
  if (llvm::Error error = program->program->forward(
          static_cast<CUstream>(stream), pointers(inputs, numInputs),
          pointers(outputs, numOutputs)))
    return fail(std::move(error));
  return ok();
}

tejit_status tejit_backward(tejit_program *program, void *stream,
                            const void *const *grad_outputs,
                            void *const *grad_inputs) {
  if (!program)
    return invalid("tejit_backward: program is null");
  size_t numGradOutputs = tejit_num_tensors(program, TEJIT_GRAD_OUTPUT);
  size_t numGradInputs = tejit_num_tensors(program, TEJIT_GRAD_INPUT);
  if ((numGradOutputs && !grad_outputs) || (numGradInputs && !grad_inputs))
    return invalid("tejit_backward: grad_outputs and grad_inputs must not be "
                   "null");
  if (llvm::Error error = program->program->backward(
          static_cast<CUstream>(stream), pointers(grad_outputs, numGradOutputs),
          pointers(grad_inputs, numGradInputs)))
    return fail(std::move(error));
  return ok();
}

tejit_status tejit_forward_ex(tejit_program *program, void *stream,
                              const void *const *inputs, void *const *outputs,
                              void *const *saved) {
  if (!program)
    return invalid("tejit_forward_ex: program is null");
  size_t numSaved = tejit_num_tensors(program, TEJIT_SAVED);
  if (numSaved && !saved)
    return invalid("tejit_forward_ex: saved must not be null");
  size_t numInputs = tejit_num_tensors(program, TEJIT_INPUT);
  size_t numOutputs = tejit_num_tensors(program, TEJIT_OUTPUT);
  if ((numInputs && !inputs) || (numOutputs && !outputs))
    return invalid("tejit_forward_ex: inputs and outputs must not be null");
  std::vector<CUdeviceptr> savedPointers = pointers(saved, numSaved);
  if (llvm::Error error = program->program->forward(
          static_cast<CUstream>(stream), pointers(inputs, numInputs),
          pointers(outputs, numOutputs),
          llvm::ArrayRef<CUdeviceptr>(savedPointers)))
    return fail(std::move(error));
  return ok();
}

/// What tejit_backward_ex, tejit_backward_dgrad_ex and
/// tejit_backward_wgrad_ex share: the arrays checked (`deferred` only for a
/// part) and the part run.
static tejit_status backwardPart(const char *what, tejit_program *program,
                                 void *stream, const void *const *inputs,
                                 const void *const *outputs,
                                 const void *const *saved,
                                 const void *const *grad_outputs,
                                 void *const *grad_inputs,
                                 void *const *deferred, BackwardPart part) {
  if (!program)
    return invalid(std::string(what) + ": program is null");
  auto count = [&](tejit_tensor_kind kind) {
    return tejit_num_tensors(program, kind);
  };
  for (auto [array, kind] :
       {std::pair{(const void *)inputs, TEJIT_INPUT},
        std::pair{(const void *)outputs, TEJIT_OUTPUT},
        std::pair{(const void *)saved, TEJIT_SAVED},
        std::pair{(const void *)grad_outputs, TEJIT_GRAD_OUTPUT},
        std::pair{(const void *)grad_inputs, TEJIT_GRAD_INPUT}})
    if (count(kind) && !array)
      return invalid(std::string(what) + ": a pointer array is null");
  if (part != BackwardPart::Both && count(TEJIT_DEFERRED) && !deferred)
    return invalid(std::string(what) +
                   ": deferred must not be null (one pointer per "
                   "TEJIT_DEFERRED tensor)");
  std::vector<CUdeviceptr> in = pointers(inputs, count(TEJIT_INPUT)),
                           out = pointers(outputs, count(TEJIT_OUTPUT)),
                           kept = pointers(saved, count(TEJIT_SAVED));
  ForwardTensors forward{in, out, kept};
  std::vector<CUdeviceptr> handed =
      part == BackwardPart::Both ? std::vector<CUdeviceptr>()
                                 : pointers(deferred, count(TEJIT_DEFERRED));
  if (llvm::Error error = program->program->backward(
          static_cast<CUstream>(stream),
          pointers(grad_outputs, count(TEJIT_GRAD_OUTPUT)),
          pointers(grad_inputs, count(TEJIT_GRAD_INPUT)), &forward, part,
          handed))
    return fail(std::move(error));
  return ok();
}

tejit_status tejit_backward_ex(tejit_program *program, void *stream,
                               const void *const *inputs,
                               const void *const *outputs,
                               const void *const *saved,
                               const void *const *grad_outputs,
                               void *const *grad_inputs) {
  return backwardPart("tejit_backward_ex", program, stream, inputs, outputs,
                      saved, grad_outputs, grad_inputs, nullptr,
                      BackwardPart::Both);
}

int tejit_delays_wgrad(const tejit_program *program) {
  return program && program->program->delaysWgrad();
}

int tejit_tensor_used_by_wgrad(const tejit_program *program,
                               tejit_tensor_kind kind, size_t index) {
  if (!program || kind < TEJIT_INPUT || kind > TEJIT_DEFERRED)
    return 0;
  return program->program->usedByWgrad(static_cast<TensorKind>(kind), index);
}

tejit_status tejit_backward_dgrad_ex(tejit_program *program, void *stream,
                                     const void *const *inputs,
                                     const void *const *outputs,
                                     const void *const *saved,
                                     const void *const *grad_outputs,
                                     void *const *grad_inputs,
                                     void *const *deferred) {
  return backwardPart("tejit_backward_dgrad_ex", program, stream, inputs,
                      outputs, saved, grad_outputs, grad_inputs, deferred,
                      BackwardPart::Dgrad);
}

tejit_status tejit_backward_wgrad_ex(tejit_program *program, void *stream,
                                     const void *const *inputs,
                                     const void *const *outputs,
                                     const void *const *saved,
                                     const void *const *grad_outputs,
                                     void *const *grad_inputs,
                                     void *const *deferred) {
  return backwardPart("tejit_backward_wgrad_ex", program, stream, inputs,
                      outputs, saved, grad_outputs, grad_inputs, deferred,
                      BackwardPart::Wgrad);
}

tejit_status tejit_meta_get(tejit_program *program, size_t index, void *host,
                            size_t bytes, void *stream) {
  if (!program || !host)
    return invalid("tejit_meta_get: program and host must not be null");
  if (llvm::Error error = program->program->getMeta(
          index, host, bytes, static_cast<CUstream>(stream)))
    return fail(std::move(error));
  return ok();
}

tejit_status tejit_meta_set(tejit_program *program, size_t index,
                            const void *host, size_t bytes, void *stream) {
  if (!program || !host)
    return invalid("tejit_meta_set: program and host must not be null");
  if (llvm::Error error = program->program->setMeta(
          index, host, bytes, static_cast<CUstream>(stream)))
    return fail(std::move(error));
  return ok();
}

tejit_status tejit_meta_device_pointer(tejit_program *program, size_t index,
                                       void **pointer) {
  if (!program || !pointer)
    return invalid("tejit_meta_device_pointer: null argument");
  auto found = program->program->metaPointer(index);
  if (!found)
    return fail(found.takeError());
  *pointer = reinterpret_cast<void *>(*found);
  return ok();
}

tejit_status tejit_rng_state_device_pointer(tejit_program *program,
                                            void **pointer) {
  if (!program || !pointer)
    return invalid("tejit_rng_state_device_pointer: null argument");
  *pointer = reinterpret_cast<void *>(program->program->rngStatePointer());
  return ok();
}

tejit_status tejit_set_seed(tejit_program *program, uint64_t seed) {
  if (!program)
    return invalid("tejit_set_seed: program is null");
  if (llvm::Error error = program->program->setSeed(seed))
    return fail(std::move(error));
  return ok();
}

tejit_status
tejit_amax_group_unique_id(unsigned char id[TEJIT_AMAX_GROUP_ID_BYTES]) {
  if (!id)
    return invalid("tejit_amax_group_unique_id: id is null");
  auto unique = NcclComm::uniqueId();
  if (!unique)
    return fail(unique.takeError());
  std::memcpy(id, &*unique, sizeof(ncclUniqueId));
  return ok();
}

tejit_status
tejit_amax_group_create(const unsigned char id[TEJIT_AMAX_GROUP_ID_BYTES],
                        int ranks, int rank, int device,
                        tejit_amax_group **group) {
  if (!id || !group)
    return invalid("tejit_amax_group_create: id and group must not be null");
  return newNcclGroup<NcclAmaxReducer>(
      NcclComm::create(ncclId(id), ranks, rank, device, "amax group"), group);
}

tejit_status tejit_amax_group_from_nccl_comm(void *nccl_comm,
                                             tejit_amax_group **group) {
  if (!group)
    return invalid("tejit_amax_group_from_nccl_comm: group is null");
  return newNcclGroup<NcclAmaxReducer>(
      NcclComm::borrow(static_cast<ncclComm_t>(nccl_comm), "amax group"),
      group);
}

tejit_status tejit_amax_group_from_function(tejit_amax_reduce_fn function,
                                            void *user_data,
                                            tejit_amax_group **group) {
  if (!function || !group)
    return invalid("tejit_amax_group_from_function: function and group must "
                   "not be null");
  *group = new tejit_amax_group{
      std::make_shared<CallbackAmaxReducer>(function, user_data)};
  return ok();
}

void tejit_amax_group_destroy(tejit_amax_group *group) { delete group; }

tejit_status tejit_program_set_amax_group(tejit_program *program,
                                          tejit_amax_group *group) {
  if (!program)
    return invalid("tejit_program_set_amax_group: program is null");
  if (llvm::Error error =
          program->program->setAmaxReducer(group ? group->reducer : nullptr))
    return fail(std::move(error));
  return ok();
}

tejit_status
tejit_tp_group_create(const unsigned char id[TEJIT_AMAX_GROUP_ID_BYTES],
                      int ranks, int rank, int device, tejit_tp_group **group) {
  if (!id || !group)
    return invalid("tejit_tp_group_create: id and group must not be null");
  return newNcclGroup<NcclTensorParallelGroup>(
      NcclComm::create(ncclId(id), ranks, rank, device,
                       "tensor-parallel group"),
      group);
}

tejit_status tejit_tp_group_from_nccl_comm(void *nccl_comm,
                                           tejit_tp_group **group) {
  if (!group)
    return invalid("tejit_tp_group_from_nccl_comm: group is null");
  return newNcclGroup<NcclTensorParallelGroup>(
      NcclComm::borrow(static_cast<ncclComm_t>(nccl_comm),
                       "tensor-parallel group"),
      group);
}

tejit_status tejit_tp_group_from_function(tejit_tp_all_reduce_fn function,
                                          void *user_data,
                                          tejit_tp_group **group) {
  if (!function || !group)
    return invalid("tejit_tp_group_from_function: function and group must "
                   "not be null");
  *group = new tejit_tp_group{std::make_shared<CallbackTensorParallelGroup>(
      TpFunctions{function, nullptr, nullptr}, user_data)};
  return ok();
}

tejit_status
tejit_tp_group_from_functions(tejit_tp_all_reduce_fn all_reduce,
                              tejit_tp_all_gather_fn all_gather,
                              tejit_tp_reduce_scatter_fn reduce_scatter,
                              void *user_data, tejit_tp_group **group) {
  if (!group)
    return invalid("tejit_tp_group_from_functions: group is null");
  *group = new tejit_tp_group{std::make_shared<CallbackTensorParallelGroup>(
      TpFunctions{all_reduce, all_gather, reduce_scatter}, user_data)};
  return ok();
}

tejit_status tejit_tp_group_set_all_to_all(tejit_tp_group *group,
                                           tejit_tp_all_to_all_fn all_to_all) {
  if (!group)
    return invalid("tejit_tp_group_set_all_to_all: group is null");
  auto *functions =
      dynamic_cast<CallbackTensorParallelGroup *>(group->group.get());
  if (!functions)
    return invalid(
        "tejit_tp_group_set_all_to_all: the group (" +
        group->group->describe() +
        ") is not one of the caller's functions; an NCCL group has its own "
        "all-to-all");
  functions->setAllToAll(all_to_all);
  return ok();
}

void tejit_tp_group_destroy(tejit_tp_group *group) { delete group; }

tejit_status tejit_program_set_tp_group(tejit_program *program,
                                        tejit_tp_group *group) {
  if (!program)
    return invalid("tejit_program_set_tp_group: program is null");
  if (llvm::Error error = program->program->setTensorParallelGroup(
          group ? group->group : nullptr))
    return fail(std::move(error));
  return ok();
}

int64_t tejit_program_tp_size(const tejit_program *program) {
  return program ? program->program->tensorParallelRanks() : 0;
}

tejit_status tejit_program_set_cp_group(tejit_program *program,
                                        tejit_tp_group *group) {
  if (!program)
    return invalid("tejit_program_set_cp_group: program is null");
  if (llvm::Error error = program->program->setContextParallelGroup(
          group ? group->group : nullptr))
    return fail(std::move(error));
  return ok();
}

int64_t tejit_program_cp_size(const tejit_program *program) {
  return program ? program->program->contextParallelRanks() : 0;
}

tejit_status tejit_program_set_forward_state_updates(tejit_program *program,
                                                     int enabled) {
  if (!program)
    return invalid("tejit_program_set_forward_state_updates: program is null");
  program->program->setForwardUpdatesState(enabled != 0);
  return ok();
}

tejit_status tejit_program_set_reuse_weight_casts(tejit_program *program,
                                                  int reuse) {
  using WeightCasts = Program::WeightCasts;
  // The mode is checked first, so that a caller learns about it even
  // without a program (machines without a GPU make none).
  static const WeightCasts modes[] = {WeightCasts::Run, WeightCasts::Reuse,
                                      WeightCasts::ReuseInGraphs,
                                      WeightCasts::Keep};
  static_assert(TEJIT_WEIGHT_CASTS_RUN == 0 && TEJIT_WEIGHT_CASTS_REUSE == 1 &&
                TEJIT_WEIGHT_CASTS_REUSE_IN_GRAPHS == 2 &&
                TEJIT_WEIGHT_CASTS_KEEP == 3);
  if (reuse < 0 || reuse >= int(std::size(modes)))
    return invalid(
        llvm::formatv("tejit_program_set_reuse_weight_casts: reuse is {0}; "
                      "expected TEJIT_WEIGHT_CASTS_RUN (0), "
                      "TEJIT_WEIGHT_CASTS_REUSE (1), "
                      "TEJIT_WEIGHT_CASTS_REUSE_IN_GRAPHS (2) or "
                      "TEJIT_WEIGHT_CASTS_KEEP (3)",
                      reuse)
            .str());
  if (!program)
    return invalid("tejit_program_set_reuse_weight_casts: program is null");
  if (llvm::Error error = program->program->setWeightCasts(modes[reuse]))
    return fail(std::move(error));
  return ok();
}

tejit_status tejit_program_set_weight_cast_flag(tejit_program *program,
                                                const void *flag) {
  if (!program)
    return invalid("tejit_program_set_weight_cast_flag: program is null");
  if (!flag)
    return invalid("tejit_program_set_weight_cast_flag: flag is null; "
                   "tejit_program_set_reuse_weight_casts leaves this mode");
  if (llvm::Error error = program->program->setWeightCastFlag(
          reinterpret_cast<CUdeviceptr>(flag)))
    return fail(std::move(error));
  return ok();
}

tejit_status tejit_program_set_capture_host_arguments(tejit_program *program,
                                                      int enabled) {
  if (!program)
    return invalid("tejit_program_set_capture_host_arguments: program is null");
  program->program->setHostArgumentsCapturable(enabled != 0);
  return ok();
}

tejit_status tejit_program_set_group_pointers(tejit_program *program,
                                              size_t index,
                                              const void *const *pointers,
                                              size_t count) {
  if (!program)
    return invalid("tejit_program_set_group_pointers: program is null");
  if (count && !pointers)
    return invalid("tejit_program_set_group_pointers: pointers is null for "
                   "a count of " +
                   std::to_string(count));
  std::vector<CUdeviceptr> addresses(count);
  for (size_t group = 0; group < count; ++group)
    addresses[group] = reinterpret_cast<CUdeviceptr>(pointers[group]);
  if (llvm::Error error = program->program->setGroupPointers(index, addresses))
    return fail(std::move(error));
  return ok();
}

tejit_status tejit_saved_cache_pointer(tejit_program *program, size_t index,
                                       void **pointer) {
  if (!program || !pointer)
    return invalid("tejit_saved_cache_pointer: null argument");
  if (index >= program->program->tensors(TensorKind::Saved).size())
    return invalid(
        llvm::formatv("tejit_saved_cache_pointer: saved tensor {0} "
                      "does not exist (the program has {1})",
                      index,
                      program->program->tensors(TensorKind::Saved).size())
            .str());
  *pointer =
      reinterpret_cast<void *>(program->program->savedCachePointer(index));
  return ok();
}

size_t tejit_program_weight_cast_cache_bytes(const tejit_program *program) {
  return program ? program->program->weightCastCacheBytes() : 0;
}

size_t tejit_program_skipped_steps(const tejit_program *program) {
  return program ? program->program->lastSkippedSteps() : 0;
}

size_t tejit_program_amax_reductions(const tejit_program *program) {
  return program ? program->program->amaxAllReduceSteps() : 0;
}

} // extern "C"
