"""TE's basic fusible operations (`transformer_engine.pytorch.ops.basic`),
with TE's constructor arguments, parameter names and initialization.

Compiled (spec layers, fused into one program per chain): BasicLinear,
Bias, LayerNorm, RMSNorm, the activations, AddExtraInput, MakeExtraOutput.
Run as PyTorch code between programs: Identity, Reshape, ConstantScale,
Dropout, Quantize (see its docstring)."""
import math
import numbers

import torch
import torch.nn.functional as F

from .. import _distributed, fp8
from ..module.base import rng_fork
from . import _parallel
from .op import BasicOperation, group_attribute

_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def _device(device):
    """TE's canonical device: the current CUDA device by default."""
    if device is None:
        return torch.device("cuda", torch.cuda.current_device())
    device = torch.device(device)
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _dtype(owner, dtype):
    dtype = torch.get_default_dtype() if dtype is None else dtype
    if dtype not in _DTYPES:
        raise ValueError(f"tejit: ops.{owner}: dtype must be torch.float32, "
                         f"torch.float16 or torch.bfloat16, got {dtype}")
    return dtype


def _positive(owner, **sizes):
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) \
                or value < 1:
            raise ValueError(f"tejit: ops.{owner}: {name} must be a positive "
                             f"int, got {value!r}")


def _group_size(group):
    """The size of a tensor-parallel group (None: the world group; 1 when
    torch.distributed is not initialized)."""
    return _distributed.group_size(group)


class BasicLinear(BasicOperation):
    """y = x W^T, W [out_features, in_features] (TE's BasicLinear: no bias;
    its `weight` starts from kaiming_uniform_(a=sqrt(5)), under
    rng_state_tracker_function().fork() when given). Under fp8_autocast
    its GEMMs run in FP8 with the recipe's scaling, as te.Linear's.
    accumulate_into_main_grad: the weight's gradient is added to its
    `main_grad` in the backward's GEMM (Megatron-LM's), as te.Linear's
    fuse_wgrad_accumulation.

    Tensor parallelism (TE's, over tensor_parallel_group, the world group
    when None; off for a group of one): tensor_parallel_mode "column"
    holds weight [out/tp, in] and returns this rank's out/tp features (the
    input gradient summed over the ranks; with sequence_parallel the input
    is this rank's slice of dim 0, gathered first); "row" holds [out,
    in/tp], takes this rank's in/tp input features and sums the output
    over the ranks (sequence_parallel: reduce-scatters it along dim 0).
    in_features / out_features stay global, local_in_features /
    local_out_features are this rank's. The compiler's Linear layer does
    the communication inside the chain's program (docs/fusible-ops.md)."""

    has_gemm = True
    tensor_parallel_group = group_attribute("tensor_parallel_group")

    def __init__(self, in_features, out_features, *, device=None, dtype=None,
                 tensor_parallel_mode=None, tensor_parallel_group=None,
                 sequence_parallel=False, rng_state_tracker_function=None,
                 accumulate_into_main_grad=False, userbuffers_options=None):
        super().__init__()
        _positive("BasicLinear", in_features=in_features,
                  out_features=out_features)
        (self.tensor_parallel_mode, self.tensor_parallel_group,
         self.tensor_parallel_size, self.sequence_parallel,
         self.local_in_features, self.local_out_features) = \
            _parallel.canonical("BasicLinear", tensor_parallel_mode,
                                tensor_parallel_group, _group_size,
                                sequence_parallel, int(in_features),
                                int(out_features))
        if userbuffers_options is not None:
            raise NotImplementedError(
                "tejit: ops.BasicLinear: userbuffers_options (communication "
                "overlap) is not built")
        if fp8.get_fp8_model_init() is not None:
            raise NotImplementedError(
                "tejit: ops.BasicLinear inside fp8_model_init (FP8 primary "
                "weights) is not built; the modules take it (te.Linear)")
        self.in_features = int(in_features)
        self.out_features = int(out_features)
        self._rng_state_tracker_function = rng_state_tracker_function
        self._accumulate_into_main_grad = bool(accumulate_into_main_grad)
        weight = torch.empty(self.local_out_features, self.local_in_features,
                             device=_device(device),
                             dtype=_dtype("BasicLinear", dtype))
        self.weight = torch.nn.Parameter(weight)
        if weight.device.type != "meta":
            self.reset_parameters()

    def reset_parameters(self):
        tracker = self._rng_state_tracker_function
        with torch.no_grad(), rng_fork(tracker):
            torch.nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))

    @property
    def input_features(self):
        return self.local_in_features

    def _tensor_parallel_groups(self):
        """[(group, size)] of the op's tensor parallelism (none when off):
        the chain's program communicates over it (_fuser.py)."""
        if self.tensor_parallel_size == 1:
            return []
        return [(self.tensor_parallel_group, self.tensor_parallel_size)]

    def _layers(self, name, features):
        return [_parallel.linear_layer(
            name, self.in_features, self.out_features, False,
            self.tensor_parallel_size, self.tensor_parallel_mode,
            self.sequence_parallel, self._accumulate_into_main_grad)
        ], self.local_out_features

    def extra_repr(self):
        text = f"in_features={self.in_features}, " \
               f"out_features={self.out_features}"
        if self.tensor_parallel_mode is not None:
            text += f", tensor_parallel_mode={self.tensor_parallel_mode!r}" \
                    f", tensor_parallel_size={self.tensor_parallel_size}"
        return text


class Bias(BasicOperation):
    """y = x + b, b [size] (TE's Bias; starts at zeros). tensor_parallel
    (TE's): the input holds this rank's size/tp features of a column-
    parallel output, and `bias` is this rank's [size/tp] (off for a group
    of one); nothing is communicated."""

    tensor_parallel_group = group_attribute("tensor_parallel_group")

    def __init__(self, size, *, device=None, dtype=None,
                 tensor_parallel=False, tensor_parallel_group=None):
        super().__init__()
        _positive("Bias", size=size)
        self.size = int(size)
        mode = "column" if tensor_parallel else None
        _, group, tp, _, _, self.local_size = _parallel.canonical(
            "Bias", mode, tensor_parallel_group, _group_size, False, 1,
            self.size, names=("", "size"))
        self.tensor_parallel = tp > 1
        self.tensor_parallel_group = group
        self.tensor_parallel_size = tp
        self.bias = torch.nn.Parameter(torch.zeros(
            self.local_size, device=_device(device),
            dtype=_dtype("Bias", dtype)))

    def reset_parameters(self):
        with torch.no_grad():
            self.bias.zero_()

    @property
    def input_features(self):
        return self.local_size

    def _layers(self, name, features):
        return [{"type": "Bias", "name": name, "size": self.local_size}], \
            self.local_size


class _Norm(BasicOperation):
    """LayerNorm and RMSNorm over the last dim (TE's ops): `weight` starts
    at 1 (0 with zero_centered_gamma, which applies 1 + weight), LayerNorm's
    `bias` at 0."""

    _type = None

    def __init__(self, normalized_shape, *, eps=1e-5, device=None,
                 dtype=None, zero_centered_gamma=False, sm_margin=0):
        super().__init__()
        name = type(self).__name__
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        normalized_shape = tuple(normalized_shape)
        if len(normalized_shape) != 1:
            raise NotImplementedError(
                f"tejit: ops.{name} normalizes over the last dim only; got "
                f"normalized_shape {normalized_shape}")
        _positive(name, normalized_shape=normalized_shape[0])
        self.normalized_shape = normalized_shape
        self.eps = float(eps)
        self.zero_centered_gamma = bool(zero_centered_gamma)
        # sm_margin (SMs left to other kernels) is accepted and unused.
        self.sm_margin = sm_margin
        dtype = _dtype(name, dtype)
        device = _device(device)
        self.weight = torch.nn.Parameter(torch.empty(
            normalized_shape, device=device, dtype=dtype))
        if self._type == "LayerNorm":
            self.bias = torch.nn.Parameter(torch.empty(
                normalized_shape, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self):
        with torch.no_grad():
            self.weight.fill_(0.0 if self.zero_centered_gamma else 1.0)
            if self._type == "LayerNorm":
                self.bias.zero_()

    @property
    def input_features(self):
        return self.normalized_shape[0]

    def _layers(self, name, features):
        size = self.normalized_shape[0]
        return [{"type": self._type, "name": name, "hidden_size": size,
                 "eps": self.eps,
                 "zero_centered_gamma": self.zero_centered_gamma}], size


class LayerNorm(_Norm):
    _type = "LayerNorm"


class RMSNorm(_Norm):
    _type = "RMSNorm"


class _Activation(BasicOperation):
    """An activation over the last dim; gated ones (TE's GLU convention:
    act(first half) * second half) halve it. cache_quantized_input
    (TE's, to keep the FP8 input for the backward) is accepted: tejit's
    programs choose what they keep."""

    _activation = None
    _gated = False

    def __init__(self, *, cache_quantized_input=False):
        super().__init__()
        self.cache_quantized_input = bool(cache_quantized_input)

    def _params(self):
        return {}

    def _layers(self, name, features):
        if self._gated and features % 2:
            raise ValueError(f"tejit: ops.{type(self).__name__} splits its "
                             f"input's last dim into two halves; it has "
                             f"{features} features")
        layer = {"type": "Activation", "name": name,
                 "activation": self._activation, "features": features}
        params = self._params()
        if params:
            layer["activation_params"] = params
        return [layer], features // 2 if self._gated else features


def _activation(name, activation, gated, doc):
    return type(name, (_Activation,), {"_activation": activation,
                                       "_gated": gated, "__doc__": doc})


GELU = _activation("GELU", "gelu", False, "GELU, tanh approximation (TE's).")
QGELU = _activation("QGELU", "qgelu", False, "x * sigmoid(1.702 x).")
ReLU = _activation("ReLU", "relu", False, "max(x, 0).")
SReLU = _activation("SReLU", "srelu", False, "relu(x)^2.")
SiLU = _activation("SiLU", "silu", False, "x * sigmoid(x).")
GEGLU = _activation("GEGLU", "geglu", True, "GELU(a) * b.")
QGEGLU = _activation("QGEGLU", "qgeglu", True, "QGELU(a) * b.")
ReGLU = _activation("ReGLU", "reglu", True, "ReLU(a) * b.")
SReGLU = _activation("SReGLU", "sreglu", True, "SReLU(a) * b.")


class SwiGLU(_Activation):
    """SiLU(a) * b. glu_interleave_size (TE's interleaved halves) is not
    built: only None."""

    _activation = "swiglu"
    _gated = True

    def __init__(self, *, cache_quantized_input=False,
                 glu_interleave_size=None):
        super().__init__(cache_quantized_input=cache_quantized_input)
        if glu_interleave_size is not None:
            raise NotImplementedError(
                "tejit: ops.SwiGLU: glu_interleave_size is not built (the "
                "halves must be contiguous)")


class ClampedSwiGLU(_Activation):
    """GPT-OSS's SwiGLU (TE's ClampedSwiGLU): a' sigmoid(alpha a') (b' + 1)
    with a' = min(a, limit), b' = clamp(b, -limit, limit)."""

    _activation = "clamped_swiglu"
    _gated = True

    def __init__(self, *, limit=7.0, alpha=1.702,
                 cache_quantized_input=False):
        super().__init__(cache_quantized_input=cache_quantized_input)
        if not float(limit) > 0.0:
            raise ValueError(f"tejit: ops.ClampedSwiGLU: limit must be > 0, "
                             f"got {limit}")
        self.limit = float(limit)
        self.alpha = float(alpha)

    def _params(self):
        return {"limit": self.limit, "alpha": self.alpha}


class AddExtraInput(BasicOperation):
    """output = input + the chain's next extra input (TE's; same shape).
    in_place=True (TE: add into the extra input's memory) is refused."""

    num_extra_inputs = 1

    def __init__(self, *, in_place=False):
        super().__init__()
        if in_place:
            raise NotImplementedError(
                "tejit: ops.AddExtraInput(in_place=True) is not built: the "
                "program writes its output to memory of its own")
        self._in_place = False

    def _layers(self, name, features):
        return [{"type": "AddExtraInput", "name": name,
                 "features": features}], features


class MakeExtraOutput(BasicOperation):
    """Returns the tensor at this point as an extra output of the chain;
    its gradient joins the one flowing back (TE's). in_place=True (TE:
    accumulate into that gradient's memory) is accepted: the sum is the
    same."""

    num_extra_outputs = 1

    def __init__(self, *, in_place=False):
        super().__init__()
        self._in_place = bool(in_place)

    def _layers(self, name, features):
        return [{"type": "MakeExtraOutput", "name": name,
                 "features": features}], features


# --- ops run as PyTorch code between programs -------------------------------


class Identity(BasicOperation):
    compiled = False

    def _eager(self, x):
        return x


class Reshape(BasicOperation):
    """x.reshape(shape) (TE's; -1 allowed)."""

    compiled = False

    def __init__(self, shape):
        super().__init__()
        self._shape = tuple(shape)

    def _eager(self, x):
        return x.reshape(self._shape)


class ConstantScale(BasicOperation):
    """x * scale (TE's)."""

    compiled = False

    def __init__(self, scale):
        super().__init__()
        self.scale = float(scale)

    def _eager(self, x):
        return x * self.scale


class Dropout(BasicOperation):
    """TE's Dropout(p): torch's dropout while training."""

    compiled = False

    def __init__(self, p):
        super().__init__()
        if not 0.0 <= float(p) <= 1.0:
            raise ValueError(f"tejit: ops.Dropout: p must be in [0, 1], got "
                             f"{p}")
        self.dropout_probability = float(p)

    def _eager(self, x):
        return F.dropout(x, self.dropout_probability, self.training)


class Quantize(BasicOperation):
    """TE's Quantize(forward=True, backward=False), which hands the next op
    an FP8 tensor (its input's, or its gradient's). In tejit the compiler
    places every FP8 cast where a GEMM reads its operand, with the
    recipe's scaling: before a Linear this op changes nothing (the GEMM
    casts the same tensor), so it is the identity. Before a non-GEMM op
    TE's output would carry the cast's rounding, which tejit does not
    add."""

    compiled = False

    def __init__(self, forward=True, backward=False):
        super().__init__()
        self._quantize_forward = bool(forward)
        self._quantize_backward = bool(backward)

    def _eager(self, x):
        return x
