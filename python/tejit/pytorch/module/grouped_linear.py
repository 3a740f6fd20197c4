"""te.GroupedLinear: num_gemms Linears over consecutive token segments of
one input (the experts of a mixture-of-experts layer), and TE's
Fp8Padding / Fp8Unpadding; docs/grouped-linear.md is the contract.

The module's program is the spec layer `type: GroupedLinear`, whose inputs
are `input` [T, 1, in], `m_splits` (int32 [G], passed as a host pointer:
the C API's tejit_tensor_is_host) and the stacked `weight` [G, out, in]
and `bias` [G, out]; with fuse_wgrad_accumulation its backward also
takes `main_grad.layers.0.weight` [G, out, in], the weights' main_grads
stacked, or as G pointers (_main_grad.StackedSlot). Arguments and splits
are checked in _grouped.py (without PyTorch, so that tests/python checks
them everywhere).
"""
import math

import torch
import torch.nn.functional as F

from .. import fp8
from ..float8_tensor import Float8Tensor
from . import _args, _delayed_wgrad, _grouped, _grouped_fp8, _main_grad
from ._groups import RepacksParts, adjacent, joined_rows, pack_rows
from .base import TransformerEngineBaseModule


def _split_values(m_splits, num_gemms, owner="GroupedLinear"):
    """`m_splits` as a sequence for _grouped's checks: a sequence as it
    is; a tensor must be 1-D and of an integer dtype, and one on the GPU is
    read back (tolist synchronizes the device)."""
    if not isinstance(m_splits, torch.Tensor):
        return m_splits
    if (m_splits.dim() != 1 or m_splits.is_floating_point()
            or m_splits.is_complex() or m_splits.dtype == torch.bool):
        raise ValueError(
            f"{owner}: m_splits must be a list of {num_gemms} ints or "
            f"a 1-D integer tensor, got a {m_splits.dim()}-D tensor of "
            f"{m_splits.dtype}")
    return m_splits.tolist()


class GroupedLinear(RepacksParts, TransformerEngineBaseModule):
    """Transformer Engine's GroupedLinear, compiled by tejit:
    `forward(inp, m_splits)` applies GEMM i (y = x W_i^T + b_i) to rows
    [o_i, o_i + m_splits[i]) of `inp` [..., in_features] (its leading dims
    flattened into tokens), o_i the sum of the splits before i; returns
    [..., out_features], or (output, [bias0, ...]) with return_bias=True
    (the biases not added, as TE).

    Parameters, TE's names: `weight0`..`weight{G-1}` [out_features,
    in_features] (init_method, default N(0, 0.023^2), each on its own) and
    `bias0`..`bias{G-1}` [out_features] (zeros; absent with bias=False).
    They are views of one stacked buffer, [G, out, in] and [G, out], which
    the program takes as it is. Where a caller replaced one (e.g.
    load_state_dict(assign=True)), each call stacks them into a new tensor
    instead (a copy per call); .to(), .cuda(), .half(), deepcopy and
    unpickling pack them into one buffer again.

    `m_splits`: a list or tuple of num_gemms ints (Transformer Engine's
    form), or a 1-D integer tensor, best on the CPU: a CUDA tensor is read
    back to the host, which waits for the GPU (a synchronization per
    call). Each split >= 0, summing to the input's tokens; empty experts
    are fine. Under fp8_autocast each split must be a multiple of 16 (pad
    them with Fp8Padding, as with TE). The program is compiled for the
    token count rounded up to a multiple of 64 (zero rows appended, the
    output cut back), so batches whose counts differ by routing share one.

    Precision: no recipe (the GEMMs in the activation dtype),
    DelayedScaling (per-GEMM scaling state in the module's FP8 meta state,
    `fp8_meta.*` in the state_dict: the G input slots then the G weight
    slots forward, the G gradient slots backward), Float8CurrentScaling
    or Float8BlockScaling (DeepSeek-V3's: each expert's tokens cast in 1-D
    blocks of 128 as their own tensor, the weights in 128 x 128 tiles or
    1-D blocks; no meta state; x/grad_block_scaling_dim=2 is refused).
    Tensor parallelism as TE's GroupedLinear (docs/grouped-linear.md):
    tp_size (or tp_group's size) and parallel_mode only set this rank's
    shapes: "column" gives it out_features / tp rows of every expert
    (weight{i} [out/tp, in]; output [..., out/tp]), "row" in_features / tp
    columns (weight{i} [out, in/tp]; input [..., in/tp], output the rank's
    partial sum [..., out]); in_features / out_features are then this
    rank's. The layer communicates nothing: the MoE token dispatcher
    gathers and sums over the TP group (as Megatron-LM's does around TE's
    GroupedLinear), and sequence_parallel changes nothing. A bias with
    tp_size > 1 is refused (ValueError), as in TE. Userbuffers overlap
    and save_original_input are refused (NotImplementedError naming
    them); ub_name is accepted and unused. delay_wgrad_compute=True (TE's)
    leaves the experts' weight gradients to backward_dw(), as Linear's
    (docs/delay-wgrad.md); the biases' come with autograd's backward.

    Built inside fp8_model_init (FP8 primary weights, docs/fp8-weights.md)
    each `weight{i}` is a Float8Tensor of its own (nominal dtype
    params_dtype), with its own scale_inv and scaling state, as in TE; the
    experts' FP8 data, scale_invs and transposes lie back to back in one
    buffer each (_grouped_fp8.py), which an FP8 program reads without a
    copy (spec `fp8_weights`). Without an FP8 autocast the program runs on
    the dequantized weights. Under Float8BlockScaling such a module is
    refused (NotImplementedError), as the other modules' FP8 weights are.

    fuse_wgrad_accumulation=True (Megatron-LM's gradient accumulation
    fusion, as TE's): each `weight{i}` needs a `.main_grad` [out_features,
    in_features] (float32, or bfloat16 / float16: one dtype for the
    module, on the weight's device, contiguous), to which the backward
    adds that expert's weight gradient inside its wgrad GEMM, in place
    wherever the main_grads lie: as one stacked [G, out, in] view when
    weight0's .. weight{G-1}'s main_grads lie back to back in that order in
    one buffer, else as one pointer per expert (e.g. in reverse order, as
    Megatron-Core's grad buffer lays parameters out); no copy either way.
    .grad follows TE: a weight with Megatron-LM's
    `grad_added_to_main_grad` gets it set True and a placeholder .grad
    (zeros with `zero_out_wgrad`), one without it no .grad. A frozen
    expert (requires_grad False) needs no main_grad. The biases' gradients
    stay ordinary .grad.

    CUDA graphs replay the splits they were captured with, as they replay
    every shape: for routing whose splits stay fixed (capacity-padded, as
    Megatron-LM's drop-and-pad), capture with them as a fixed keyword
    argument, `make_graphed_callables(module, (x,), sample_kwargs={
    "m_splits": splits}, ...)`; a graphed call given other splits raises
    ValueError. The program reads the host splits during capture and the
    graph replays them (tejit.Program.set_capture_host_arguments).
    """

    def __init__(self, num_gemms, in_features, out_features,
                 sequence_parallel=False, fuse_wgrad_accumulation=False,
                 tp_group=None, tp_size=1, get_rng_state_tracker=None,
                 rng_tracker_name=None, init_method=None, bias=True,
                 return_bias=False, params_dtype=None, parallel_mode=None,
                 device="cuda", ub_overlap_rs=False, ub_overlap_ag=False,
                 ub_name=None, delay_wgrad_compute=False,
                 save_original_input=False):
        super().__init__(params_dtype)
        owner = "GroupedLinear"
        self.num_gemms, self.in_features, self.out_features = (
            _grouped.check_sizes(num_gemms, in_features, out_features))
        _grouped.check_unsupported(
            ub_overlap_rs=ub_overlap_rs, ub_overlap_ag=ub_overlap_ag,
            save_original_input=save_original_input)
        self._init_delay_wgrad(delay_wgrad_compute)
        tp = _args.tp_world_size(owner, tp_group, tp_size)
        _grouped.check_tensor_parallel(tp, parallel_mode, bias)
        self.fuse_wgrad_accumulation = bool(fuse_wgrad_accumulation)
        self.parallel_mode = parallel_mode
        self._init_tensor_parallel(owner, tp_group, tp, sequence_parallel,
                                   get_rng_state_tracker, rng_tracker_name)
        # in_features / out_features are this rank's, as in TE (the
        # layer communicates nothing: its spec is the rank's shard).
        self.in_features, self.out_features = _grouped.local_features(
            tp, parallel_mode, self.in_features, self.out_features)
        self.use_bias = bool(bias)
        self.return_bias = bool(return_bias)
        self.ub_name = ub_name
        groups, out, features = (self.num_gemms, self.out_features,
                                 self.in_features)
        weights = torch.empty((groups, out, features),
                              dtype=self.params_dtype, device=device)
        init = init_method or _args.default_init_method()
        for index in range(groups):
            self._add_parameter(f"weight{index}", (out, features), init,
                                device, tracked=True, gemm_weight=True,
                                tensor=weights[index])
        if self.use_bias:
            biases = torch.zeros((groups, out), dtype=self.params_dtype,
                                 device=device)
            for index in range(groups):
                self._add_parameter(f"bias{index}", (out,),
                                    torch.nn.init.zeros_, device,
                                    tensor=biases[index])
        else:
            for index in range(groups):
                self.register_parameter(f"bias{index}", None)
        self.reset_parameters()

    # --- parameters --------------------------------------------------------

    def _weights(self):
        return [getattr(self, f"weight{i}") for i in range(self.num_gemms)]

    def _biases(self):
        return [getattr(self, f"bias{i}") for i in range(self.num_gemms)]

    def _argument(self, name, dtype, fp8=False):
        """The program's stacked `weight` [G, out, in] and `bias` [G, out]:
        the buffer the parameters are views of (no copy) while they are,
        else a stack made for this call; both differentiable, so each
        parameter gets its slice of the program's gradient. With
        return_bias the program adds zeros. Under fuse_wgrad_accumulation
        the weights' slices carry TE's placeholder gradients instead
        (_main_grad.StackedParameters)."""
        groups, out = self.num_gemms, self.out_features
        if name == "weight":
            weights = self._weights()
            if fp8 or self.primary_weights_in_fp8:
                # fp8_model_init: the Float8Tensor experts (_grouped_fp8).
                return _grouped_fp8.stacked(
                    weights, [f"weight{i}" for i in range(groups)], dtype,
                    fp8, self.fuse_wgrad_accumulation)
            if self.fuse_wgrad_accumulation:
                return _main_grad.StackedParameters.apply(
                    tuple(weights), adjacent,
                    *[weight.to(dtype) for weight in weights])
            return joined_rows(weights, dtype).view(
                groups, out, self.in_features)
        if name == "bias":
            biases = self._biases()
            if self.return_bias:
                return self._zero_bias((groups, out), dtype,
                                       biases[0].device)
            return joined_rows(biases, dtype).view(groups, out)
        return super()._argument(name, dtype, fp8)

    def _main_grad_slot(self, name):
        """fuse_wgrad_accumulation: the program's stacked `weight` adds
        into the main_grads of weight0..weight{G-1}
        (_main_grad.StackedSlot)."""
        if name != "weight":
            return super()._main_grad_slot(name)
        return _main_grad.StackedSlot(
            self._weights(), [f"weight{i}" for i in range(self.num_gemms)],
            adjacent)

    def _deliver_wgrad(self, name, gradient):
        """backward_dw: the stacked weight's gradient [G, out, in], each
        expert's slice to its weight{i}."""
        if name != "weight":
            super()._deliver_wgrad(name, gradient)
            return
        for weight, part in zip(self._weights(), gradient.unbind(0)):
            _delayed_wgrad.accumulate(weight, part)

    def _requires_grad(self, inp):
        if not self.return_bias:
            return super()._requires_grad(inp)
        # The returned biases reach autograd outside the program.
        return inp.requires_grad or any(w.requires_grad
                                        for w in self._weights())

    def _repack(self):
        """The weights (biases) back in one buffer when something gave
        them memory of their own (see pack_rows); Float8Tensor weights
        (fp8_model_init) their FP8 data, scale_invs and transposes
        (_grouped_fp8.pack)."""
        weights = self._weights()
        fp8_weights = [isinstance(weight, Float8Tensor) for weight in weights]
        if all(fp8_weights):
            _grouped_fp8.pack(weights)
        if any(fp8_weights):
            weights = None
        for parts in (weights, self._biases()):
            if parts is not None and parts[0] is not None:
                pack_rows(parts)

    def reset_parameters(self):
        # Under fp8_model_init each weight is quantized into memory of its
        # own: packed afterwards.
        super().reset_parameters()
        self._repack()

    # --- what the base class runs ------------------------------------------

    def _compile(self, key, spec, shape):
        compiled = super()._compile(key, spec, shape)
        # A captured graph replays the captured splits (the class
        # docstring): allowed, as for any shape a graph captures.
        compiled.program.set_capture_host_arguments(True)
        return compiled

    def _layer_spec(self):
        return _grouped.layer_spec(self.num_gemms, self.in_features,
                                   self.out_features, self.use_bias)

    def _input_features(self):
        return self.in_features

    def forward(self, inp, m_splits, is_first_microbatch=None):
        """`inp` [..., in_features] (a CUDA tensor), `m_splits` the tokens
        of each GEMM (see the class docstring); `is_first_microbatch` is
        TE's FP8 weight caching, as Linear.forward takes it."""
        dtype = self._checked_input(inp)
        recipe = fp8.get_fp8_recipe()
        _grouped.check_recipe(recipe)
        lead = tuple(inp.shape[:-1])
        tokens = math.prod(lead)
        splits = _grouped.checked_splits(
            _split_values(m_splits, self.num_gemms), self.num_gemms, tokens,
            fp8=recipe is not None)
        rows = _grouped.padded_tokens(tokens)
        x = inp.to(dtype).reshape(tokens, self.in_features)
        if rows > tokens:
            # Zero rows past sum(m_splits): padding, which the program
            # leaves out of every result (their gradient is cut off here).
            x = F.pad(x, (0, 0, 0, rows - tokens))
        x = x.contiguous().view(rows, 1, self.in_features)
        # A new host tensor per call: the backward reads the forward's.
        host_splits = torch.tensor(splits, dtype=torch.int32)
        out = self._run_program(
            {"input": x, "m_splits": host_splits}, dtype, rows,
            {"seq_length": rows, "batch_size": 1}, inp.shape,
            is_first_microbatch=is_first_microbatch)["output"]
        out = out.view(rows, self.out_features)
        if rows > tokens:
            # Only then: autograd's backward of a slice, even of every row,
            # zero-fills a whole gradient and copies into it (0.36 ms a step
            # for 16384 x 14336 on an H200).
            out = out[:tokens]
        out = out.view(*lead, self.out_features)
        if self.return_bias:
            return out, [None if b is None else b.to(out.dtype)
                         for b in self._biases()]
        return out

    def _tp_communicates(self):
        # TE's GroupedLinear leaves the communication to the MoE dispatcher.
        return False

    def extra_repr(self):
        return (f"num_gemms={self.num_gemms}, "
                f"in_features={self.in_features}, "
                f"out_features={self.out_features}, bias={self.use_bias}")


def _padding_splits(owner, m_splits, num_gemms):
    """`m_splits` of a padding module: num_gemms ints >= 0 (a sequence or
    a 1-D integer tensor)."""
    return _grouped.split_list(_split_values(m_splits, num_gemms, owner),
                               num_gemms, owner)


class Fp8Padding(torch.nn.Module):
    """Transformer Engine's Fp8Padding: `forward(inp, m_splits)` appends
    zero rows to each segment of `inp` [tokens, features] so that every
    split becomes a multiple of `align_size` (16, what GroupedLinear asks
    under FP8); returns (padded input, padded splits). Differentiable: the
    padding rows' gradient is dropped."""

    def __init__(self, num_gemms, align_size=None):
        super().__init__()
        self.num_gemms = _grouped.check_sizes(num_gemms, 1, 1,
                                              owner="Fp8Padding")[0]
        self.align_size = _grouped.alignment(align_size, "Fp8Padding")

    def forward(self, inp, m_splits):
        splits = _padding_splits("Fp8Padding", m_splits, self.num_gemms)
        padded = _grouped.aligned_splits(splits, self.align_size)
        x = inp.reshape(-1, inp.shape[-1])
        if x.shape[0] != sum(splits):
            raise ValueError(f"Fp8Padding: the input has {x.shape[0]} rows, "
                             f"m_splits sums to {sum(splits)}")
        if padded == splits:
            return inp, splits
        parts = [F.pad(part, (0, 0, 0, target - size))
                 for part, size, target in zip(x.split(splits), splits,
                                               padded)]
        return torch.cat(parts), padded


class Fp8Unpadding(torch.nn.Module):
    """Transformer Engine's Fp8Unpadding: `forward(inp, m_splits)` with the
    splits *before* padding removes the rows Fp8Padding(num_gemms,
    align_size) appended to each segment of `inp`; differentiable."""

    def __init__(self, num_gemms, align_size=None):
        super().__init__()
        self.num_gemms = _grouped.check_sizes(num_gemms, 1, 1,
                                              owner="Fp8Unpadding")[0]
        self.align_size = _grouped.alignment(align_size, "Fp8Unpadding")

    def forward(self, inp, m_splits):
        splits = _padding_splits("Fp8Unpadding", m_splits,
                                 self.num_gemms)
        padded = _grouped.aligned_splits(splits, self.align_size)
        if padded == splits:
            return inp
        x = inp.reshape(-1, inp.shape[-1])
        if x.shape[0] != sum(padded):
            raise ValueError(f"Fp8Unpadding: the input has {x.shape[0]} "
                             f"rows, the padded splits {padded} sum to "
                             f"{sum(padded)}")
        return torch.cat([part[:size] for part, size in
                          zip(x.split(padded), splits)])

