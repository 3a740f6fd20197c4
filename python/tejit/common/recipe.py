"""FP8 recipes with Transformer Engine's names and fields, so that TE code
only changes `from transformer_engine.common import recipe` to
`from tejit.common import recipe`.

Framework-free (no torch): a recipe is plain data. Each recipe validates
itself when made and again in `to_spec()` (TE's recipes are mutable
dataclasses, so a field may change after construction), and `to_spec()`
gives the `recipe` mapping of a layer spec (docs/spec-format.md).

Errors: ValueError for what Transformer Engine rejects too (pure E5M2,
unknown algorithm names, block-scaling GEMMs of two 2-D operands) or for
values out of range; NotImplementedError for TE features tejit does not
implement (callable algorithms, fp8_mha, FP8 attention outside
DelayedScaling, precision overrides, amax epsilons, the MXFP8 and NVFP4
recipes).

FP8 attention (docs/fp8-attention.md): DelayedScaling(fp8_dpa=True) runs
the attention core of the attention modules on FP8 q, k, v; its spec
mapping then has `fp8_dpa: true` (absent when off, so that specs and
compile caches without it stay as they were).
"""
import dataclasses
import enum
import os
import typing
import warnings

__all__ = ["Format", "Recipe", "DelayedScaling", "Float8CurrentScaling",
           "MMParams", "QParams", "MXFP8BlockScaling", "Float8BlockScaling",
           "NVFP4BlockScaling"]


class _FormatHelper(typing.NamedTuple):
    """The largest finite value of the forward and backward FP8 formats."""
    max_fwd: float
    max_bwd: float


class Format(enum.Enum):
    """FP8 formats, as TE's: E4M3 everywhere; E5M2 everywhere (not a valid
    recipe format); HYBRID, E4M3 forward and E5M2 backward (the default)."""
    E4M3 = _FormatHelper(max_fwd=448, max_bwd=448)
    E5M2 = _FormatHelper(max_fwd=57344, max_bwd=57344)
    HYBRID = _FormatHelper(max_fwd=448, max_bwd=57344)


class _OverrideLinearPrecision(typing.NamedTuple):
    """TE 1.x's DelayedScaling.override_linear_precision: run a GEMM role in
    high precision."""
    fprop: bool = False
    dgrad: bool = False
    wgrad: bool = False


@dataclasses.dataclass(frozen=True)
class MMParams:
    """GEMM options of a role; use_split_accumulator=False is cuBLASLt's
    FP8 fast accumulation."""
    use_split_accumulator: bool = True


@dataclasses.dataclass(frozen=True)
class QParams:
    """Quantization options of a tensor role under current or block
    scaling."""
    power_2_scale: bool = False
    amax_epsilon: float = 0.0


def _check_format(fp8_format):
    if not isinstance(fp8_format, Format):
        raise TypeError(f"fp8_format must be a recipe.Format, not "
                        f"{type(fp8_format).__name__}")
    if fp8_format is Format.E5M2:
        # TE asserts the same: E5M2's 2-bit mantissa is too coarse for
        # weights and activations.
        raise ValueError("Pure E5M2 training is not supported (as in "
                         "Transformer Engine): use Format.HYBRID (E4M3 "
                         "forward, E5M2 backward) or Format.E4M3")


def _check_flag(owner, name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{owner}.{name} must be a bool, not "
                        f"{type(value).__name__}")


def _check_fp8_attention(owner, fp8_dpa, fp8_mha, delayed=False):
    """TE's FP8 attention flags of a recipe (`delayed`: DelayedScaling):
    fp8_dpa runs under DelayedScaling only; fp8_mha (FP8 tensors between
    the QKV GEMM, the attention and the projection) nowhere."""
    _check_flag(owner, "fp8_dpa", fp8_dpa)
    _check_flag(owner, "fp8_mha", fp8_mha)
    if fp8_mha:
        runs = ("fp8_dpa=True (FP8 attention between bf16/fp16 GEMM "
                "outputs) is what runs" if delayed else
                "fp8_dpa needs the DelayedScaling recipe")
        raise NotImplementedError(
            f"{owner}(fp8_mha=True) is not supported by tejit: {runs}")
    if fp8_dpa and not delayed:
        raise NotImplementedError(
            f"{owner}(fp8_dpa=True) is not supported by tejit: fp8_dpa "
            f"needs the DelayedScaling recipe")


_QUANT_FIELDS = ("fp8_quant_fwd_inp", "fp8_quant_fwd_weight",
                 "fp8_quant_bwd_grad")


def _one_power_2_scale(recipe, owner):
    """The power_2_scale of `recipe`'s three QParams (fp8_quant_fwd_inp,
    fp8_quant_fwd_weight, fp8_quant_bwd_grad), which must agree: tejit has
    one switch for every tensor of a recipe, and no amax floor."""
    params = [getattr(recipe, name) for name in _QUANT_FIELDS]
    for name, qparams in zip(_QUANT_FIELDS, params):
        if not isinstance(qparams, QParams):
            raise TypeError(f"{owner}.{name} must be a recipe.QParams")
        if qparams.amax_epsilon != 0.0:
            raise NotImplementedError(
                f"{owner}.{name}.amax_epsilon={qparams.amax_epsilon}: "
                f"an amax floor is not supported by tejit (only 0.0)")
    flags = {bool(qparams.power_2_scale) for qparams in params}
    if len(flags) > 1:
        raise NotImplementedError(
            f"{owner}: power_2_scale differs between fp8_quant_fwd_inp, "
            f"fp8_quant_fwd_weight and fp8_quant_bwd_grad; tejit applies "
            f"one setting to every tensor")
    return flags.pop()


def _check_backward_override(owner, backward_override):
    # TE reads the default from $NVTE_BACKWARD_OVERRIDE; tejit has one
    # backward, TE's default (None).
    if backward_override is not None:
        raise NotImplementedError(
            f"{owner}(backward_override={backward_override!r}) is not "
            f"supported by tejit: only None (the backward quantizes as TE's "
            f"default does)")


class Recipe:
    """Base of the recipes, with TE's classification class methods."""

    @classmethod
    def delayed(cls):
        return issubclass(cls, DelayedScaling)

    @classmethod
    def float8_current_scaling(cls):
        return issubclass(cls, Float8CurrentScaling)

    @classmethod
    def float8_per_tensor_scaling(cls):
        return issubclass(cls, (DelayedScaling, Float8CurrentScaling))

    @classmethod
    def mxfp8(cls):
        return issubclass(cls, MXFP8BlockScaling)

    @classmethod
    def float8_block_scaling(cls):
        return issubclass(cls, Float8BlockScaling)

    @classmethod
    def nvfp4(cls):
        return issubclass(cls, NVFP4BlockScaling)

    def to_spec(self):
        """The spec's `recipe` mapping (docs/spec-format.md)."""
        raise NotImplementedError


@dataclasses.dataclass
class DelayedScaling(Recipe):
    """TE's DelayedScaling: each tensor's scale comes from the amax history
    of earlier steps (shared/FP8.md). Fields as TE's, plus TE 1.x's
    `interval` (deprecated and unused there, warned about here) and
    `override_linear_precision` (only the all-False default). fp8_dpa=True
    runs the attention core on FP8 q, k, v (docs/fp8-attention.md; the
    attention modules refuse what it does not run); fp8_mha is refused."""
    margin: int = 0
    fp8_format: Format = Format.HYBRID
    amax_history_len: int = 1024
    amax_compute_algo: typing.Union[str, typing.Callable] = "max"
    scaling_factor_compute_algo: typing.Optional[typing.Callable] = None
    reduce_amax: bool = True
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: typing.Optional[str] = None
    interval: typing.Optional[int] = None
    override_linear_precision: _OverrideLinearPrecision = \
        _OverrideLinearPrecision()

    def __post_init__(self):
        if self.interval is not None:
            warnings.warn("DelayedScaling(interval=...) is deprecated and "
                          "unused (as in Transformer Engine)",
                          DeprecationWarning, stacklevel=3)
        self._validate()

    def _validate(self):
        owner = "DelayedScaling"
        _check_format(self.fp8_format)
        if (not isinstance(self.margin, int) or isinstance(self.margin, bool)
                or self.margin < 0):
            raise ValueError(f"{owner}.margin must be an int >= 0, got "
                             f"{self.margin!r}")
        if (not isinstance(self.amax_history_len, int)
                or isinstance(self.amax_history_len, bool)
                or self.amax_history_len < 1):
            raise ValueError(f"{owner}.amax_history_len must be an int >= 1, "
                             f"got {self.amax_history_len!r}")
        if callable(self.amax_compute_algo):
            raise NotImplementedError(
                f"{owner}: a callable amax_compute_algo is not supported: "
                f"tejit compiles the scale update into a kernel; use 'max' "
                f"or 'most_recent'")
        if self.amax_compute_algo not in ("max", "most_recent"):
            raise ValueError(f"{owner}.amax_compute_algo must be 'max' or "
                             f"'most_recent', got {self.amax_compute_algo!r}")
        if self.scaling_factor_compute_algo is not None:
            raise NotImplementedError(
                f"{owner}: scaling_factor_compute_algo is not supported: "
                f"tejit computes scale = fp8_max * 2^-margin / amax in its "
                f"update kernel")
        _check_flag(owner, "reduce_amax", self.reduce_amax)
        _check_fp8_attention(owner, self.fp8_dpa, self.fp8_mha,
                             delayed=True)
        _check_backward_override(owner, self.backward_override)
        if tuple(self.override_linear_precision) != (False, False, False):
            raise NotImplementedError(
                f"{owner}: override_linear_precision="
                f"{tuple(self.override_linear_precision)} is not supported: "
                f"every GEMM of a recipe runs in FP8")

    def to_spec(self):
        self._validate()
        spec = {"type": "DelayedScaling", "fp8_format": self.fp8_format.name,
                "margin": self.margin,
                "amax_history_len": self.amax_history_len,
                "amax_compute_algo": self.amax_compute_algo,
                "reduce_amax": self.reduce_amax}
        if self.fp8_dpa:
            spec["fp8_dpa"] = True
        return spec


def _env_power_2_scales():
    # TE's default for use_power_2_scales (TE reads it once, at import).
    return os.getenv("NVTE_FP8_CURRENT_SCALING_POWER_2_SCALES", "0") == "1"


# TE's GEMM settings under current scaling: fast accumulation for fprop,
# split accumulators for dgrad and wgrad. tejit's kernels are built for
# exactly these.
_FPROP = MMParams(use_split_accumulator=False)
_DGRAD = MMParams(use_split_accumulator=True)
_WGRAD = MMParams(use_split_accumulator=True)


@dataclasses.dataclass
class Float8CurrentScaling(Recipe):
    """TE's Float8CurrentScaling: each tensor is scaled by its own amax at
    the time of the cast. Fields as TE's. In TE the fp8_quant_* defaults are
    fixed when the class is defined; here a None fp8_quant_* follows
    use_power_2_scales, and the three must agree (tejit has one
    power_2_scale switch)."""
    use_power_2_scales: bool = dataclasses.field(
        default_factory=_env_power_2_scales)
    fp8_format: Format = Format.HYBRID
    fp8_quant_fwd_inp: typing.Optional[QParams] = None
    fp8_quant_fwd_weight: typing.Optional[QParams] = None
    fp8_quant_bwd_grad: typing.Optional[QParams] = None
    fp8_gemm_fprop: MMParams = _FPROP
    fp8_gemm_dgrad: MMParams = _DGRAD
    fp8_gemm_wgrad: MMParams = _WGRAD
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: typing.Optional[str] = None

    def __post_init__(self):
        for name in _QUANT_FIELDS:
            if getattr(self, name) is None:
                setattr(self, name,
                        QParams(power_2_scale=bool(self.use_power_2_scales)))
        self._validate()

    def _power_2_scale(self):
        return _one_power_2_scale(self, "Float8CurrentScaling")

    def _validate(self):
        owner = "Float8CurrentScaling"
        _check_format(self.fp8_format)
        for name, want in (("fp8_gemm_fprop", _FPROP),
                           ("fp8_gemm_dgrad", _DGRAD),
                           ("fp8_gemm_wgrad", _WGRAD)):
            if getattr(self, name) != want:
                raise NotImplementedError(
                    f"{owner}.{name}={getattr(self, name)} is not supported: "
                    f"tejit uses TE's defaults (fast accumulation for fprop, "
                    f"split accumulators for dgrad and wgrad)")
        _check_fp8_attention(owner, self.fp8_dpa, self.fp8_mha)
        _check_backward_override(owner, self.backward_override)
        return self._power_2_scale()

    def to_spec(self):
        power_2 = self._validate()
        return {"type": "Float8CurrentScaling",
                "fp8_format": self.fp8_format.name, "power_2_scale": power_2}


def _env_fp32_block_scales():
    # TE's default for use_f32_scales (TE reads it once, at import): float32
    # block scales instead of powers of two.
    return os.getenv("NVTE_FP8_BLOCK_SCALING_FP32_SCALES", "0") == "1"


# TE's GEMM settings under block scaling: split accumulators for every
# GEMM (TE asserts them; cuBLASLt's block-scaled kernels accumulate so).
_BLOCK_GEMM = MMParams(use_split_accumulator=True)
_BLOCK_DIM_FIELDS = ("x_block_scaling_dim", "w_block_scaling_dim",
                     "grad_block_scaling_dim")
# The operand pairs of the three GEMMs (fprop x*w, dgrad grad*w, wgrad
# grad*x): cuBLASLt has no kernel for two 2-D block-scaled operands.
_BLOCK_GEMM_PAIRS = (("fprop", "x_block_scaling_dim", "w_block_scaling_dim"),
                     ("dgrad", "grad_block_scaling_dim",
                      "w_block_scaling_dim"),
                     ("wgrad", "grad_block_scaling_dim",
                      "x_block_scaling_dim"))


@dataclasses.dataclass
class Float8BlockScaling(Recipe):
    """TE's Float8BlockScaling (DeepSeek-V3's recipe, docs/block-scaling.md):
    every GEMM operand is scaled per block of 128 elements along the GEMM's
    contracting dim (dim 1) or per 128 x 128 tile (dim 2), each block by its
    own amax at the time of the cast; x is a GEMM's input, w its weight,
    grad an output gradient. Fields and defaults as TE's (E4M3, 1-D x and
    grad, 2-D w, power-of-2 scales unless
    NVTE_FP8_BLOCK_SCALING_FP32_SCALES=1). As in Float8CurrentScaling, a
    None fp8_quant_* follows use_f32_scales, and the three must agree.
    FP8 primary weights (fp8_model_init) are not supported under it."""
    use_f32_scales: bool = dataclasses.field(
        default_factory=_env_fp32_block_scales)
    fp8_format: Format = Format.E4M3
    fp8_quant_fwd_inp: typing.Optional[QParams] = None
    fp8_quant_fwd_weight: typing.Optional[QParams] = None
    fp8_quant_bwd_grad: typing.Optional[QParams] = None
    x_block_scaling_dim: int = 1
    w_block_scaling_dim: int = 2
    grad_block_scaling_dim: int = 1
    fp8_gemm_fprop: MMParams = _BLOCK_GEMM
    fp8_gemm_dgrad: MMParams = _BLOCK_GEMM
    fp8_gemm_wgrad: MMParams = _BLOCK_GEMM
    fp8_dpa: bool = False
    fp8_mha: bool = False
    backward_override: typing.Optional[str] = None

    def __post_init__(self):
        _check_flag("Float8BlockScaling", "use_f32_scales",
                    self.use_f32_scales)
        for name in _QUANT_FIELDS:
            if getattr(self, name) is None:
                setattr(self, name, QParams(
                    power_2_scale=not self.use_f32_scales, amax_epsilon=0.0))
        self._validate()

    def _power_2_scale(self):
        return _one_power_2_scale(self, "Float8BlockScaling")

    def _validate(self):
        owner = "Float8BlockScaling"
        _check_format(self.fp8_format)
        for name in _BLOCK_DIM_FIELDS:
            value = getattr(self, name)
            if (not isinstance(value, int) or isinstance(value, bool)
                    or value not in (1, 2)):
                raise ValueError(
                    f"{owner}.{name} must be 1 (blocks of 128 elements) or "
                    f"2 (128 x 128 tiles), got {value!r}")
        for gemm, a, b in _BLOCK_GEMM_PAIRS:
            if getattr(self, a) == 2 and getattr(self, b) == 2:
                raise ValueError(
                    f"{owner}: {a}=2 with {b}=2 would make the {gemm} GEMM "
                    f"pair two 2-D block-scaled operands, which cuBLASLt "
                    f"(and Transformer Engine) does not support; set one of "
                    f"them to 1")
        for name in ("fp8_gemm_fprop", "fp8_gemm_dgrad", "fp8_gemm_wgrad"):
            value = getattr(self, name)
            if not isinstance(value, MMParams):
                raise TypeError(f"{owner}.{name} must be a recipe.MMParams")
            if not value.use_split_accumulator:
                raise ValueError(
                    f"{owner}.{name}: use_split_accumulator=False (FP8 fast "
                    f"accumulation) is not allowed under block scaling (as "
                    f"in Transformer Engine): block-scaled GEMMs use split "
                    f"accumulators")
        _check_fp8_attention(owner, self.fp8_dpa, self.fp8_mha)
        _check_backward_override(owner, self.backward_override)
        return self._power_2_scale()

    def to_spec(self):
        power_2 = self._validate()
        return {"type": "Float8BlockScaling",
                "fp8_format": self.fp8_format.name,
                "x_block_scaling_dim": self.x_block_scaling_dim,
                "w_block_scaling_dim": self.w_block_scaling_dim,
                "grad_block_scaling_dim": self.grad_block_scaling_dim,
                "power_2_scale": power_2}


class _UnsupportedRecipe(Recipe):
    """TE recipes tejit does not implement: they exist so that TE code fails
    with a message rather than an AttributeError."""
    _why = ""

    def __init__(self, *args, **kwargs):
        raise NotImplementedError(
            f"{type(self).__name__} is not supported by tejit ({self._why}); "
            f"use DelayedScaling, Float8CurrentScaling or Float8BlockScaling")


class MXFP8BlockScaling(_UnsupportedRecipe):
    _why = "MXFP8 needs Blackwell GPUs"


class NVFP4BlockScaling(_UnsupportedRecipe):
    _why = "NVFP4 needs Blackwell GPUs"
