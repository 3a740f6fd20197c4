/*===- tejit.h - the tejit C API -----------------------------------*- C
-*-===*\
|*                                                                            *|
|* A plain C ABI over the tejit compiler and runtime, for the Python package  *|
|* (ctypes) and for C/C++ programs. Every call returns a tejit_status; when   *|
|* it is not TEJIT_OK, tejit_last_error() gives the message (per thread).     *|
|*                                                                            *|
|* A program is one compiled layer stack and its state: the FP8 meta state    *|
|* (scales, amax histories), the tensors the forward saves for the backward,  *|
|* and its scratch arena, all in device memory. Tensors cross as raw device   *|
|* pointers in the order and with the shapes the info calls report; every     *|
|* call runs on the CUDA stream the caller gives (NULL: the legacy default    *|
|* stream) and does not synchronize unless it says so.                        *|
|*                                                                            *|
\*===----------------------------------------------------------------------===*/
#ifndef TEJIT_TEJIT_H
#define TEJIT_TEJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tejit_status {
  TEJIT_OK = 0,
  TEJIT_ERROR_INVALID_ARGUMENT = 1,   /* a null handle, an index out of range */
  TEJIT_ERROR_COMPILE = 2,            /* the spec or IR was rejected */
  TEJIT_ERROR_NO_DEVICE = 3,          /* no CUDA driver or no GPU */
  TEJIT_ERROR_UNSUPPORTED_DEVICE = 4, /* FP8 needs sm_89 or newer */
  TEJIT_ERROR_CUDA = 5,               /* a CUDA driver call failed */
  TEJIT_ERROR_CUBLAS = 6,             /* a cuBLASLt call failed */
  TEJIT_ERROR_UNSUPPORTED = 7,        /* not implemented (e.g. attention) */
  TEJIT_ERROR_STATE = 8,              /* e.g. backward before forward */
  TEJIT_ERROR_INTERNAL = 9
} tejit_status;

typedef enum tejit_dtype {
  TEJIT_F32 = 0,
  TEJIT_F16 = 1,
  TEJIT_BF16 = 2,
  TEJIT_F8E4M3 = 3,
  TEJIT_F8E5M2 = 4,
  TEJIT_I64 = 5,
  TEJIT_I32 = 6,
  TEJIT_I8 = 7,
  TEJIT_BOOL = 8
} tejit_dtype;

/* The message of this thread's last failed call ("" if none). */
const char *tejit_last_error(void);
/* The tejit build id (git commit). */
const char *tejit_version(void);

/* Loads the CUDA driver and checks device `ordinal`: fills its compute
 * capability and name (may be NULL). TEJIT_ERROR_NO_DEVICE without a driver
 * or GPU, TEJIT_ERROR_UNSUPPORTED_DEVICE below sm_89. */
tejit_status tejit_device_info(int ordinal, int *major, int *minor, char *name,
                               size_t name_size);

typedef struct tejit_program tejit_program;

/* What tejit_compile compiles. */
typedef struct tejit_compile_options {
  int training;       /* 1: forward + backward; 0: inference forward only */
  const char *recipe; /* NULL (the spec's), "delayed", "current", "none", or
                         a #te recipe attribute */
  int device;         /* CUDA device ordinal; kernels are built for it */
} tejit_compile_options;

/* Compiles a layer spec (YAML or JSON text) or te IR text (`source`), or the
 * file at `path` when source is NULL, for the GPU, through the kernel cache,
 * and makes a program with fresh state (scales 1, histories 0). */
tejit_status tejit_compile(const char *source, const char *path,
                           const tejit_compile_options *options,
                           tejit_program **program);
/* Loads a bundle written by `te-compile --emit=cuda -o DIR`. */
tejit_status tejit_load_bundle(const char *dir, int device,
                               tejit_program **program);
/* Frees the program's device memory and unloads its kernels: not while a
 * CUDA stream capture in global mode (PyTorch's default) is in progress,
 * which that would invalidate. */
void tejit_program_destroy(tejit_program *program);

/* The IR of a spec or IR text at a stage: "te", "primitive", "autodiff",
 * "scaled", "fused", "planned", or "cuda" (the kernels' source). Free the
 * text with tejit_free_string. Needs no GPU. */
tejit_status tejit_compile_ir(const char *source, const char *path,
                              const tejit_compile_options *options,
                              const char *stage, char **text);
void tejit_free_string(char *text);

/* The program's executable plan as JSON (docs/plan-format.md): every step
 * with its kernel, launch geometry, GEMM shapes and buffers. Free the text
 * with tejit_free_string. */
tejit_status tejit_program_plan(const tejit_program *program, char **text);

/* Tensors a program exchanges with the caller. */
typedef enum tejit_tensor_kind {
  TEJIT_INPUT = 0,       /* forward inputs: activations, then parameters */
  TEJIT_OUTPUT = 1,      /* forward outputs */
  TEJIT_GRAD_OUTPUT = 2, /* backward inputs: one per forward output, then,
                            under fuse_wgrad_accumulation, one float32
                            "main_grad.<weight>" per GEMM weight */
  TEJIT_GRAD_INPUT = 3,  /* backward outputs: one per forward input */
  TEJIT_META = 4,        /* FP8 meta state: scale, scale_inv, amax_history */
  TEJIT_SAVED = 5,       /* what the forward saves for the backward (FP8
                            copies, norm statistics, pre-activations): kept by
                            the program for tejit_forward, by the caller for
                            tejit_forward_ex */
  TEJIT_DEFERRED = 6     /* delay_wgrad_compute: what the backward's data-
                            gradient half hands its weight-gradient half (dY's
                            FP8 transpose, its scale_inv as the cast used it):
                            kept by the program for tejit_backward(_ex), by
                            the caller for tejit_backward_dgrad_ex and
                            tejit_backward_wgrad_ex */
} tejit_tensor_kind;

typedef struct tejit_tensor_info {
  const char *name; /* e.g. "input", "layers.0.fc1_weight" */
  tejit_dtype dtype;
  int rank;
  int64_t shape[8];
  size_t bytes;
  int is_parameter;
} tejit_tensor_info;

size_t tejit_num_tensors(const tejit_program *program, tejit_tensor_kind kind);
tejit_status tejit_tensor_info_get(const tejit_program *program,
                                   tejit_tensor_kind kind, size_t index,
                                   tejit_tensor_info *info);
/* 1 when the tensor is passed as a host pointer instead of a device one:
 * a grouped op's m_splits (docs/grouped-linear.md), G int32 values in host
 * memory, read during the call (and again by the backward, which is given
 * the forward's pointer: keep the values until it has run). A program with
 * one cannot be captured into a CUDA graph. 0 otherwise or on bad input. */
int tejit_tensor_is_host(const tejit_program *program, tejit_tensor_kind kind,
                         size_t index);
/* 1 when the program was compiled for training (has a backward). */
int tejit_is_training(const tejit_program *program);

/* Runs the forward: `inputs` and `outputs` hold one device pointer per
 * TEJIT_INPUT / TEJIT_OUTPUT tensor (a host pointer for a host tensor,
 * tejit_tensor_is_host). A training program saves what its
 * backward needs (and remembers the input pointers, and the output pointers
 * when its backward reads an output, as attention's does: keep them alive
 * and unchanged until the backward) and updates the forward FP8 state. */
tejit_status tejit_forward(tejit_program *program, void *stream,
                           const void *const *inputs, void *const *outputs);
/* Runs the backward of the last forward: `grad_outputs` one pointer per
 * TEJIT_GRAD_OUTPUT, `grad_inputs` one per TEJIT_GRAD_INPUT (written, not
 * accumulated; except that a weight's gradient under
 * fuse_wgrad_accumulation is its main_grad plus the gradient, and may be
 * given the main_grad's own pointer). Updates the backward FP8 state. */
tejit_status tejit_backward(tejit_program *program, void *stream,
                            const void *const *grad_outputs,
                            void *const *grad_inputs);

/* The forward and backward with the saved tensors in the caller's memory
 * (one pointer per TEJIT_SAVED tensor), so several forwards may await their
 * backward (autograd keeps them alive). The backward takes what its forward
 * saw: the same inputs, outputs and saved tensors, unchanged. Both update
 * the program's FP8 state as the plain calls do. (Programs with dropout keep
 * one RNG state: their backward must follow its forward before the next.) */
tejit_status tejit_forward_ex(tejit_program *program, void *stream,
                              const void *const *inputs, void *const *outputs,
                              void *const *saved);
tejit_status tejit_backward_ex(tejit_program *program, void *stream,
                               const void *const *inputs,
                               const void *const *outputs,
                               const void *const *saved,
                               const void *const *grad_outputs,
                               void *const *grad_inputs);

/* delay_wgrad_compute (docs/delay-wgrad.md): 1 when the program's weight
 * gradients are computed apart from the rest of its backward (Transformer
 * Engine's backward_dw), 0 otherwise or on bad input. tejit_backward and
 * tejit_backward_ex still run both halves, one after the other. */
int tejit_delays_wgrad(const tejit_program *program);
/* The backward in two halves, each given what tejit_backward_ex is, and
 * `deferred`, one device pointer per TEJIT_DEFERRED tensor in the caller's
 * memory (several backwards may then await their wgrad half; run each
 * wgrad half with the tensors its dgrad half was given, unchanged).
 * tejit_backward_dgrad_ex writes the data and bias gradients (and the
 * deferred tensors) and updates the backward FP8 state;
 * tejit_backward_wgrad_ex writes the weight gradients (adding main_grad
 * where the program accumulates) and updates no state. Each reads and
 * writes only its half's entries of grad_inputs and grad_outputs (the
 * others may be NULL; tejit_tensor_used_by_wgrad tells them apart), and
 * the wgrad half reads only the inputs, outputs and saved tensors
 * tejit_tensor_used_by_wgrad names (others may be NULL; keep those alive
 * and unchanged until it has run). The halves run on the program's scratch
 * arena: order them on one stream with the program's other calls.
 * TEJIT_ERROR_STATE for a program without delay_wgrad_compute. */
tejit_status tejit_backward_dgrad_ex(tejit_program *program, void *stream,
                                     const void *const *inputs,
                                     const void *const *outputs,
                                     const void *const *saved,
                                     const void *const *grad_outputs,
                                     void *const *grad_inputs,
                                     void *const *deferred);
tejit_status tejit_backward_wgrad_ex(tejit_program *program, void *stream,
                                     const void *const *inputs,
                                     const void *const *outputs,
                                     const void *const *saved,
                                     const void *const *grad_outputs,
                                     void *const *grad_inputs,
                                     void *const *deferred);
/* 1 when the weight-gradient half reads tensor `index` of `kind`
 * (TEJIT_INPUT, TEJIT_OUTPUT, TEJIT_SAVED, TEJIT_GRAD_OUTPUT,
 * TEJIT_DEFERRED: every deferred tensor) or writes it (TEJIT_GRAD_INPUT: the
 * delayed weight gradients); 0 otherwise, for a program without
 * delay_wgrad_compute, or on bad input. A TEJIT_GRAD_INPUT with 0 is
 * written by the data-gradient half. */
int tejit_tensor_used_by_wgrad(const tejit_program *program,
                               tejit_tensor_kind kind, size_t index);
/* Whether forwards and backwards on a capturing stream (CUDA graph capture)
 * may read the program's host arguments (tejit_tensor_is_host: a grouped
 * op's m_splits): 0, the default, refuses such a capture
 * (TEJIT_ERROR_UNSUPPORTED), since the graph replays the values of the
 * captured call (its per-group GEMM sizes and the device copy of the
 * splits); 1 allows it, for callers whose splits stay fixed (capacity-
 * padded routing). Eager calls read the values at every call either way. */
tejit_status tejit_program_set_capture_host_arguments(tejit_program *program,
                                                      int enabled);

/* fuse_wgrad_accumulation of a grouped op (GroupedLinear), whose
 * main_grad is one stacked [G, N, K] TEJIT_GRAD_OUTPUT tensor, when the
 * weights' main_grads are G separate [N, K] buffers instead (Megatron-Core's
 * gradient buffer lays parameters out in reverse order): `pointers` holds
 * group g's device pointer at [g], `count` = G. From the next backward on,
 * each group's weight gradient is added in place into its buffer (an empty
 * group's is left as it is), and the backward takes NULL for that
 * TEJIT_GRAD_OUTPUT and for its weight's TEJIT_GRAD_INPUT. `count` 0 goes
 * back to one stacked buffer. TEJIT_ERROR_INVALID_ARGUMENT for a tensor
 * that is no grouped op's main_grad, a plan that cannot (one whose grouped
 * GEMM does not alone read the main_grad), a count other than G or a NULL
 * pointer. */
tejit_status tejit_program_set_group_pointers(tejit_program *program,
                                              size_t index,
                                              const void *const *pointers,
                                              size_t count);

/* Copies a TEJIT_META tensor to or from host memory (`bytes` long), ordered
 * on `stream`; get synchronizes the stream. Meta tensors are float32. */
tejit_status tejit_meta_get(tejit_program *program, size_t index, void *host,
                            size_t bytes, void *stream);
tejit_status tejit_meta_set(tejit_program *program, size_t index,
                            const void *host, size_t bytes, void *stream);
/* The device pointer of a TEJIT_META tensor (for device-side save/restore). */
tejit_status tejit_meta_device_pointer(tejit_program *program, size_t index,
                                       void **pointer);

/* Restarts the dropout random stream at `seed` (offset 0; each forward then
   moves the offset on, on the device, so CUDA-graph replays draw fresh
   masks). Waits for the upload. Under context parallelism each rank draws
   its masks by local position, so give each rank its own seed (as
   tejit.pytorch does: docs/context-parallel.md). */
tejit_status tejit_set_seed(tejit_program *program, uint64_t seed);
/* The device address of the dropout stream's state (two uint64: seed, then
   offset), NULL when the program draws no dropout masks. Copying the 16
   bytes aside and back, ordered on the stream, rewinds the stream, so that
   a recomputed forward (activation checkpointing) draws the same masks. */
tejit_status tejit_rng_state_device_pointer(tejit_program *program,
                                            void **pointer);

/* Whether the program's forwards update the DelayedScaling state (1, the
 * default) or leave it as it stands (0): TE updates the forward's scales
 * only while autograd records, so an inference forward under
 * torch.no_grad() scales with the state as it is, whatever ran before, and
 * reduces nothing across ranks. Backwards always update. */
tejit_status tejit_program_set_forward_state_updates(tejit_program *program,
                                                     int enabled);

/* Weight casts: the steps of a forward that read only parameters and the
 * FP8 state (a weight's FP8 cast, in training with its transpose, and under
 * current scaling its amax and scale) can write into device memory of the
 * program's own, kept between forwards, so that later forwards skip them
 * (TEJIT_WEIGHT_CAST_CACHE=0 when the program is made turns this off).
 * Inference programs (no backward) always keep them (1 byte per cast weight
 * element); training programs once a mode other than RUN is set (1 byte
 * more, for the transpose). `reuse`, for the next forwards:
 *   TEJIT_WEIGHT_CASTS_RUN (the default): cast (a training program as if
 *     it kept nothing);
 *   TEJIT_WEIGHT_CASTS_REUSE: skip the casts when the last forward that ran
 *     them had the same parameter pointers and the FP8 state has been
 *     neither updated nor written (tejit_meta_set) since; a forward captured
 *     in a CUDA graph still casts (and does not count as having cast);
 *   TEJIT_WEIGHT_CASTS_REUSE_IN_GRAPHS (TE's is_first_microbatch=False):
 *     the same, also after state updates (each cast is kept with the
 *     scale_inv it was made with; a skipped DelayedScaling weight records
 *     amax 0, as in TE) and in a captured forward, whose replays read the
 *     casts the latest casting forward left;
 *   TEJIT_WEIGHT_CASTS_KEEP (TE's is_first_microbatch=True): cast, into the
 *     memory kept.
 * Skipping, the caller promises the parameters' contents, and state written
 * through tejit_meta_device_pointer, have not changed since the casts. */
#define TEJIT_WEIGHT_CASTS_RUN 0
#define TEJIT_WEIGHT_CASTS_REUSE 1
#define TEJIT_WEIGHT_CASTS_REUSE_IN_GRAPHS 2
#define TEJIT_WEIGHT_CASTS_KEEP 3
tejit_status tejit_program_set_reuse_weight_casts(tejit_program *program,
                                                  int reuse);
/* The weight casts decided on the device, at each forward (TE's
 * skip_fp8_weight_update): `flag` is the address of a device int32 that
 * the caller sets, on the forward's stream, before each forward or replay
 * of a captured one: 0 casts into the memory kept (as
 * TEJIT_WEIGHT_CASTS_KEEP), nonzero reuses what the latest casting forward
 * left there (as TEJIT_WEIGHT_CASTS_REUSE_IN_GRAPHS: a skipped
 * DelayedScaling weight records amax 0). One captured forward then serves
 * both kinds of micro-batch. The int must stay allocated while the program
 * may use it; tejit_program_set_reuse_weight_casts leaves this mode. Plans
 * written before format 4 cannot (TEJIT_ERROR_UNSUPPORTED here). */
tejit_status tejit_program_set_weight_cast_flag(tejit_program *program,
                                                const void *flag);
/* Where TEJIT_SAVED tensor `index` lives in the kept weight casts while the
 * mode is not TEJIT_WEIGHT_CASTS_RUN (a training forward's weight
 * transpose and its scale_inv), NULL when it does not. Given this address
 * for it, tejit_forward_ex uses the kept cast in place, and its backward
 * reads the latest cast (the forwards that kept or reused the casts share
 * it, as TE's is_first_microbatch shares one FP8 weight); given another,
 * the forward copies the cast there. */
tejit_status tejit_saved_cache_pointer(tejit_program *program, size_t index,
                                       void **pointer);
/* Device bytes the program keeps for its weight casts (0: no cache). */
size_t tejit_program_weight_cast_cache_bytes(const tejit_program *program);
/* Steps the last forward skipped because it reused the weight casts. */
size_t tejit_program_skipped_steps(const tejit_program *program);

/* Amax reduction across ranks (DelayedScaling's reduce_amax, on by
 * default): ranks that train one model (data parallel) scale their FP8
 * tensors from the element-wise max of their amaxes. A program reduces over
 * the group set with tejit_program_set_amax_group before each scale update;
 * without one it runs as one process. Every rank of a group must run the
 * same programs' forwards and backwards in the same order (each update is a
 * collective). A group is one of:
 *   - an NCCL communicator tejit makes: one rank calls
 *     tejit_amax_group_unique_id, sends the bytes to the others, and every
 *     rank calls tejit_amax_group_create (it blocks until all have);
 *   - the caller's NCCL communicator (an ncclComm_t), which must outlive the
 *     group and every program that uses it;
 *   - the caller's function, which reduces `count` float32 values at device
 *     address `amaxes` in place (MAX) on `stream` and returns 0.
 * Programs keep the group they use alive: destroy the handle when done. */
typedef struct tejit_amax_group tejit_amax_group;
#define TEJIT_AMAX_GROUP_ID_BYTES 128
typedef int (*tejit_amax_reduce_fn)(void *user_data, void *amaxes, size_t count,
                                    void *stream);

tejit_status
tejit_amax_group_unique_id(unsigned char id[TEJIT_AMAX_GROUP_ID_BYTES]);
tejit_status
tejit_amax_group_create(const unsigned char id[TEJIT_AMAX_GROUP_ID_BYTES],
                        int ranks, int rank, int device,
                        tejit_amax_group **group);
tejit_status tejit_amax_group_from_nccl_comm(void *nccl_comm,
                                             tejit_amax_group **group);
tejit_status tejit_amax_group_from_function(tejit_amax_reduce_fn function,
                                            void *user_data,
                                            tejit_amax_group **group);
void tejit_amax_group_destroy(tejit_amax_group *group);
/* Sets (NULL: clears) the group `program` reduces over from its next call
 * on. Fails when the group's communicator is on another device. */
tejit_status tejit_program_set_amax_group(tejit_program *program,
                                          tejit_amax_group *group);
/* How many amax reductions the program's plan has (0: its recipe has none:
 * no DelayedScaling, or reduce_amax off). */
size_t tejit_program_amax_reductions(const tejit_program *program);

/* Tensor parallelism (docs/tensor-parallel.md; TE's tp_group / tp_size): a
 * program compiled with tp_size N > 1 holds this rank's shard of each
 * parallel layer and sums partial results over the N ranks of its
 * tensor-parallel group (after a row-parallel GEMM in the forward, after a
 * column-parallel GEMM's dgrad in the backward). With sequence parallelism
 * (the spec's sequence_parallel) the sums become all-gathers (before a
 * column-parallel GEMM) and reduce-scatters (after a row-parallel GEMM),
 * and in the backward the reverse. It needs the group, set with
 * tejit_program_set_tp_group: without one its forward and backward fail
 * (TEJIT_ERROR_STATE) before they enqueue anything. Every rank of the
 * group must run the same programs' calls in the same order (each step is
 * a collective). A group is one of:
 *   - an NCCL communicator tejit makes: one rank calls
 *     tejit_amax_group_unique_id (both groups are NCCL communicators named
 *     by an NCCL unique id: the same call makes the bytes for either, but
 *     each communicator needs an id of its own), sends the bytes to the
 *     others, and every rank calls tejit_tp_group_create (it blocks until
 *     all have);
 *   - the caller's NCCL communicator (an ncclComm_t), which must outlive the
 *     group and every program that uses it;
 *   - the caller's functions (tejit_tp_group_from_functions), each of which
 *     enqueues its collective over the ranks on `stream` (a CUstream) and
 *     returns 0 (nonzero fails the call), over elements of type `dtype`
 *     (TEJIT_BF16, TEJIT_F16 or TEJIT_F32):
 *       all_reduce sums the `count` elements at device address `data` in
 *         place (tejit copies the step's input to its output first when
 *         they differ; the compiler sums most in place);
 *       all_gather writes the `count` elements at `input` of every rank to
 *         `output`, rank r's at element r * count (N * count in all);
 *       reduce_scatter sums the N * `count` elements at `input` over the
 *         ranks and writes this rank's chunk of the sum (elements
 *         [rank * count, (rank + 1) * count)) to `output`;
 *     `input` and `output` never overlap. Any of them may be NULL: a
 *     program with steps that need a missing one fails its calls
 *     (TEJIT_ERROR_STATE, naming the function) before they enqueue
 *     anything. Only programs with sequence parallelism gather and
 *     scatter; tejit_tp_group_from_function is all_reduce alone.
 * Programs keep the group they use alive: destroy the handle when done. */
typedef struct tejit_tp_group tejit_tp_group;
typedef int (*tejit_tp_all_reduce_fn)(void *user_data, void *data, size_t count,
                                      int dtype, void *stream);
/* `count` is per rank: the elements at `input`; `output` holds N times as
 * many. */
typedef int (*tejit_tp_all_gather_fn)(void *user_data, const void *input,
                                      void *output, size_t count, int dtype,
                                      void *stream);
/* `count` is per rank: the elements written to `output`; `input` holds N
 * times as many. */
typedef int (*tejit_tp_reduce_scatter_fn)(void *user_data, const void *input,
                                          void *output, size_t count, int dtype,
                                          void *stream);

tejit_status
tejit_tp_group_create(const unsigned char id[TEJIT_AMAX_GROUP_ID_BYTES],
                      int ranks, int rank, int device, tejit_tp_group **group);
tejit_status tejit_tp_group_from_nccl_comm(void *nccl_comm,
                                           tejit_tp_group **group);
tejit_status tejit_tp_group_from_function(tejit_tp_all_reduce_fn function,
                                          void *user_data,
                                          tejit_tp_group **group);
/* The functions get `user_data` first; any of them may be NULL (only
 * `group` must not be). */
tejit_status
tejit_tp_group_from_functions(tejit_tp_all_reduce_fn all_reduce,
                              tejit_tp_all_gather_fn all_gather,
                              tejit_tp_reduce_scatter_fn reduce_scatter,
                              void *user_data, tejit_tp_group **group);
/* Context parallelism's a2a (cp_comm_type a2a) exchanges blocks with an
 * all-to-all: block j (`count` elements, so `input` and `output` hold N *
 * count) of `output` gets this rank's block of rank j's `input`; they never
 * overlap. An NCCL group has it; a group of the caller's functions gets it
 * here (with the group's user_data), before a program first runs over the
 * group: TEJIT_ERROR_INVALID_ARGUMENT for an NCCL group; NULL removes it. A
 * program with cp_alltoall steps over a group without one fails its calls
 * naming all_to_all. */
typedef int (*tejit_tp_all_to_all_fn)(void *user_data, const void *input,
                                      void *output, size_t count, int dtype,
                                      void *stream);
tejit_status tejit_tp_group_set_all_to_all(tejit_tp_group *group,
                                           tejit_tp_all_to_all_fn all_to_all);
void tejit_tp_group_destroy(tejit_tp_group *group);
/* Sets (NULL: clears) the group `program` sums over from its next call on.
 * Fails when the group's communicator is on another device or has another
 * number of ranks than the program's tp_size; a program without
 * tensor-parallel steps (tp_size 1) ignores the group. */
tejit_status tejit_program_set_tp_group(tejit_program *program,
                                        tejit_tp_group *group);
/* The tensor-parallel size the program was compiled for (1: none; 0 for a
 * NULL program). */
int64_t tejit_program_tp_size(const tejit_program *program);

/* Context parallelism (docs/context-parallel.md; TE's cp_group): a program
 * compiled with cp_size N > 1 holds this rank's s / N tokens of every
 * sequence (chunks r and 2N - 1 - r of 2N) and gathers the keys and values
 * of the others with a group's all-gather (and reduce-scatters their
 * gradients). The group is a tejit_tp_group of the context-parallel ranks
 * (tejit_tp_group_create, _from_nccl_comm, or _from_functions with
 * all_gather and reduce_scatter). Sets (NULL: clears) it from the next call
 * on; without one a program with cp_size > 1 fails its calls. Fails when the
 * group is on another device or has another number of ranks than cp_size. */
tejit_status tejit_program_set_cp_group(tejit_program *program,
                                        tejit_tp_group *group);
/* The context-parallel size the program was compiled for (1: none; 0 for a
 * NULL program). */
int64_t tejit_program_cp_size(const tejit_program *program);

#ifdef __cplusplus
}
#endif

#endif /* TEJIT_TEJIT_H */
