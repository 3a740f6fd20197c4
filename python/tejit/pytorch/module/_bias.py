"""The attention modules' bias arguments (docs/attention-bias.md): TE's
core_attention_bias_type / core_attention_bias / alibi_slopes, checked as
TE checks them, and what a call gives its program for them.

- post_scale_bias: the bias [1 or b, 1 or h, s_q, s_kv] (TE's shapes 1hss,
  b1ss, bhss, 11ss), cast to the activation dtype in PyTorch (autograd
  carries the gradient back through the cast) and made contiguous: the
  program's input `core_attention_bias`, added to the scaled scores. Its
  gradient (`grad.core_attention_bias`, returned to autograd) only when it
  requires grad, and only for the 1hss shape (cuDNN's limit).
- pre_scale_bias: `bias * softmax_scale` passed as a post-scale bias.
- alibi: the program's input `alibi_slopes` (float32 [h] or [b, h]), or
  none: the runtime computes TE's vanilla slopes.
- attn_mask_type="arbitrary": the mask becomes a post-scale bias (-10000
  where masked, TE's unfused fill value, plus the caller's bias if any; no
  gradient through the mask) and the program's mask type is no_mask, so it
  runs on cuDNN's fused attention, which takes no arbitrary mask.

A call's bias selects its program by (type, bias shape, requires grad,
slopes): _attention_specs.bias_spec_keys writes those into the spec.
"""
import torch

from . import _attention_specs

BIAS_ARGUMENTS = ("core_attention_bias_type", "core_attention_bias",
                  "alibi_slopes")
# TE's AttnBiasTypes.
CALL_BIAS_TYPES = ("no_bias", "pre_scale_bias", "post_scale_bias", "alibi")
# TE's unfused attention fills masked scores with this.
ARBITRARY_MASK_FILL = -10000.0


class CallBias:
    """What a call's bias arguments give its program: `key` (None without
    a bias, else (type, bias shape, requires grad, slopes) as
    _attention_specs.bias_spec_keys takes it), `inputs` {program input
    name: tensor}, and the `mask_type` the program computes (no_mask for an
    arbitrary mask turned into the bias, else the call's)."""

    def __init__(self, mask_type, key=None, inputs=None):
        self.mask_type = mask_type
        self.key = key
        self.inputs = inputs or {}

    def variant(self):
        """What the bias adds to the program's key: nothing without one,
        so that calls without a bias keep their keys."""
        return () if self.key is None else (self.key,)


def pop_arguments(call_arguments):
    """The forward's bias arguments, taken out of `call_arguments`."""
    defaults = {"core_attention_bias_type": "no_bias"}
    return {name: call_arguments.pop(name, defaults.get(name))
            for name in BIAS_ARGUMENTS}


def refuse(owner, context, core_attention_bias_type="no_bias",
           core_attention_bias=None, alibi_slopes=None):
    """NotImplementedError naming the first bias argument given, for a
    call where tejit has no attention bias (`context`: "qkv_format='thd'",
    a KV cache)."""
    given = None
    if core_attention_bias_type not in (None, "no_bias"):
        given = f"core_attention_bias_type={core_attention_bias_type!r}"
    elif core_attention_bias is not None:
        given = "core_attention_bias=..."
    elif alibi_slopes is not None:
        given = "alibi_slopes=..."
    if given is not None:
        raise NotImplementedError(
            f"{owner}.forward({given}) with {context} is not supported by "
            f"tejit: attention bias and ALiBi run on sbhd or bshd inputs "
            f"without a KV cache")


def _shape(tensor):
    return list(tensor.shape)


def _check_bias(owner, bias, batch, heads, seq_q, seq_kv, device):
    """TE's core_attention_bias [1 or b, 1 or h, s_q, s_kv], a floating
    tensor on `device`: its shape code (1hss, b1ss, bhss, 11ss)."""
    if not isinstance(bias, torch.Tensor):
        raise TypeError(f"{owner}: core_attention_bias must be a "
                        f"torch.Tensor, got {type(bias).__name__}")
    if not bias.dtype.is_floating_point:
        raise TypeError(f"{owner}: core_attention_bias must be a floating "
                        f"tensor (cast to the activation dtype), got "
                        f"{bias.dtype}")
    code = None
    if bias.dim() == 4 and tuple(bias.shape[2:]) == (seq_q, seq_kv):
        code = _attention_specs.bias_shape_code(bias.shape[0],
                                                bias.shape[1], batch, heads)
    if code is None:
        raise ValueError(
            f"{owner}: core_attention_bias must be [1 or b, 1 or h, s_q, "
            f"s_kv] = [1|{batch}, 1|{heads}, {seq_q}, {seq_kv}] (TE's "
            f"shapes 1hss, b1ss, bhss, 11ss), got {_shape(bias)}")
    if bias.device != device:
        raise ValueError(f"{owner}: core_attention_bias is on "
                         f"{bias.device}, the input on {device}")
    return code


def _check_slopes(owner, slopes, batch, heads, device):
    """(the program's alibi_slopes input or None, its code: none, heads,
    batch_heads)."""
    if slopes is None:
        return None, "none"
    if not isinstance(slopes, torch.Tensor):
        raise TypeError(f"{owner}: alibi_slopes must be a torch.Tensor, got "
                        f"{type(slopes).__name__}")
    if slopes.dtype != torch.float32:
        raise TypeError(f"{owner}: alibi_slopes must be float32, as in "
                        f"Transformer Engine; got {slopes.dtype}")
    if tuple(slopes.shape) == (heads,):
        code = "heads"
    elif tuple(slopes.shape) == (batch, heads):
        code = "batch_heads"
    else:
        raise ValueError(f"{owner}: alibi_slopes must be [h] = [{heads}] or "
                         f"[b, h] = [{batch}, {heads}] float32, got "
                         f"{_shape(slopes)}")
    if slopes.device != device:
        raise ValueError(f"{owner}: alibi_slopes is on {slopes.device}, the "
                         f"input on {device}")
    # ALiBi slopes take no gradient.
    return slopes.detach().contiguous(), code


def _arbitrary_mask(owner, attention_mask, batch, heads, seq_q, seq_kv,
                    device):
    """TE's arbitrary mask (bool, True = masked out) [1 or b, 1 or h, s_q,
    s_kv], or a lower-rank tensor that broadcasts to it, as 4-D."""
    from .attention import _one_of_pair, check_bool_mask
    attention_mask = _one_of_pair(
        attention_mask, f"{owner}: an arbitrary attention_mask is one tensor "
        f"[b, 1, s_q, s_kv]; different query and key/value masks are not "
        f"supported by tejit")
    check_bool_mask(owner, "arbitrary", attention_mask, device)
    mask = attention_mask
    if mask.dim() < 4:
        mask = mask.view(*([1] * (4 - mask.dim())), *mask.shape)
    if (mask.dim() != 4 or tuple(mask.shape[2:]) != (seq_q, seq_kv)
            or _attention_specs.bias_shape_code(mask.shape[0], mask.shape[1],
                                                batch, heads) is None):
        raise ValueError(f"{owner}: an arbitrary attention_mask must be [1 "
                         f"or b, 1 or h, s_q, s_kv] = [1|{batch}, "
                         f"1|{heads}, {seq_q}, {seq_kv}] bool (True = "
                         f"masked out), got {_shape(attention_mask)}")
    return mask


def _alibi_bias(slopes, mask_type, seq_q, seq_kv, dtype):
    """The ALiBi bias [b, h, s_q, s_kv] of slopes [b, h] (contract:
    -slope * |i - j + off|, off = s_kv - s_q but for the top-left causal
    mask types)."""
    top_left = mask_type in ("causal", "padding_causal")
    offset = 0 if top_left else seq_kv - seq_q
    rows = torch.arange(seq_q, device=slopes.device, dtype=torch.float32)
    cols = torch.arange(seq_kv, device=slopes.device, dtype=torch.float32)
    distance = (rows.view(-1, 1) - cols.view(1, -1) + offset).abs()
    batch, heads = slopes.shape
    return (-slopes.view(batch, heads, 1, 1) * distance).to(dtype)


def call_bias(owner, mask_type, attention_mask, bias_type, bias, slopes, *,
              batch, heads, seq_q, seq_kv, dtype, device, softmax_scale,
              tp_size=1):
    """A call's CallBias, after TE's checks of its bias arguments
    (`bias_type`, `bias`, `slopes`: core_attention_bias_type,
    core_attention_bias, alibi_slopes), for `batch` sequences of `heads`
    heads (this rank's), `seq_q` queries over `seq_kv` keys, activations of
    `dtype` on `device`; `softmax_scale` scales a pre_scale_bias; with
    `mask_type` "arbitrary" the `attention_mask` becomes (part of) the
    bias. `tp_size` > 1 (a block split over ranks) refuses any bias."""
    if bias_type is None:
        bias_type = "no_bias"
    if bias_type not in CALL_BIAS_TYPES:
        raise ValueError(f"{owner}: core_attention_bias_type must be one of "
                         f"{', '.join(CALL_BIAS_TYPES)}, got {bias_type!r}")
    if bias is not None and bias_type not in ("pre_scale_bias",
                                              "post_scale_bias"):
        raise ValueError(f"{owner}: core_attention_bias is given with "
                         f"core_attention_bias_type={bias_type!r}; it needs "
                         f"'post_scale_bias' or 'pre_scale_bias', as in "
                         f"Transformer Engine")
    if bias is None and bias_type in ("pre_scale_bias", "post_scale_bias"):
        raise ValueError(f"{owner}: core_attention_bias_type={bias_type!r} "
                         f"needs a core_attention_bias [1 or b, 1 or h, s_q, "
                         f"s_kv]")
    if slopes is not None and bias_type != "alibi":
        raise ValueError(f"{owner}: alibi_slopes is given with "
                         f"core_attention_bias_type={bias_type!r}; ALiBi "
                         f"slopes need 'alibi'")
    arbitrary = mask_type == "arbitrary"
    if tp_size > 1 and (bias_type != "no_bias" or arbitrary):
        given = (f"core_attention_bias_type={bias_type!r}"
                 if bias_type != "no_bias" else "attn_mask_type='arbitrary'")
        raise NotImplementedError(
            f"{owner}.forward({given}) with tensor parallelism (tp_size "
            f"{tp_size}) is not supported by tejit")
    if bias_type == "alibi":
        if arbitrary:
            raise NotImplementedError(
                f"{owner}.forward(core_attention_bias_type='alibi') with "
                f"attn_mask_type='arbitrary' is not supported by tejit (the "
                f"arbitrary mask becomes a post-scale bias); pass the ALiBi "
                f"bias as a core_attention_bias")
        inputs = {}
        slopes, code = _check_slopes(owner, slopes, batch, heads, device)
        if code == "batch_heads" and batch > 1:
            # cuDNN's engines read per-batch slopes wrong (the runtime
            # refuses them): the ALiBi bias itself, as TE passes the
            # caller's slopes to its fused attention.
            return CallBias(mask_type, ("post_scale_bias", "bhss", False,
                                        None),
                            {"core_attention_bias": _alibi_bias(
                                slopes, mask_type, seq_q, seq_kv, dtype)})
        if slopes is not None:
            inputs["alibi_slopes"] = slopes
        return CallBias(mask_type, ("alibi", None, False, code), inputs)
    passed, code = None, None
    if bias is not None:
        code = _check_bias(owner, bias, batch, heads, seq_q, seq_kv, device)
        if bias_type == "pre_scale_bias":
            # scale * (q.k + bias) = scale * q.k + scale * bias.
            bias = bias * softmax_scale
        passed = bias.to(dtype)
    if arbitrary:
        mask = _arbitrary_mask(owner, attention_mask, batch, heads, seq_q,
                               seq_kv, device)
        fill = torch.zeros(mask.shape, dtype=dtype, device=device)
        fill.masked_fill_(mask, ARBITRARY_MASK_FILL)
        passed = fill if passed is None else passed + fill
        code = _attention_specs.bias_shape_code(
            passed.shape[0], passed.shape[1], batch, heads)
        mask_type = "no_mask"
    if passed is None:
        return CallBias(mask_type)
    requires_grad = torch.is_grad_enabled() and passed.requires_grad
    if requires_grad and code != "1hss":
        shape = _shape(passed)
        if arbitrary and bias is not None and shape != _shape(bias):
            raise NotImplementedError(
                f"{owner}: core_attention_bias {_shape(bias)} requires grad, "
                f"and with the arbitrary attention_mask the bias tejit "
                f"passes is {shape} ({code}); tejit takes a bias gradient "
                f"for the 1hss shape [1, h, s_q, s_kv] only: give the mask "
                f"as [1, 1 or h, s_q, s_kv], or a bias that does not "
                f"require grad")
        raise NotImplementedError(
            f"{owner}: core_attention_bias {shape} ({code}) requires grad; "
            f"tejit takes a bias gradient for the 1hss shape [1, h, s_q, "
            f"s_kv] = {[1, heads, seq_q, seq_kv]} only (cuDNN's limit); "
            f"detach it or pass that shape")
    return CallBias(mask_type, ("post_scale_bias", code, requires_grad, None),
                    {"core_attention_bias": passed.contiguous()})
