"""GPU tests of tejit.pytorch's cross-attention blocks:
MultiheadAttention(attention_type="cross") and
TransformerLayer(layer_type="decoder"), forward and backward against
float32 PyTorch math written here from TE's definitions, on the same
inputs and parameters.

  PYTHONPATH=python python3 -m pytest tests/gpu/test_cross_attention_layers.py
  (-k decoder for the TransformerLayer only; -x -v as usual)

Data: fresh random inputs every run from the seed of
tests/gpu/test_attention_layers.py (whose helpers this file imports; one
seed for both files, printed at the start and in every failure message;
TEJIT_TEST_SEED=N repeats a run). Hidden states are s_q = 64 tokens,
the encoder output s_kv = 96 or 160 tokens, batch 2, hidden 256.

Reference (float32): the query from the (optionally normed) hidden
states, keys and values from encoder_output through TE's key_value
parameters (split key_weight / value_weight, or one fused weight whose
rows are [groups, 2, d] with qkv_weight_interleaved=True, all keys then
all values without), attention of s_q queries over s_kv keys (GQA,
scale 1/sqrt(d), "causal" aligned top-left, key padding from TE's mask
pair (query mask all False) or from the key/value mask alone), the
projection; in the decoder, TE's residual chain self-attention ->
cross-attention -> LayerNormMLP (post-LN residuals taken from each
block's norm output), rotary on the self-attention only.

Compared, by relative L2 error ||got - ref|| / ||ref|| (the bounds of
test_attention_layers.py): the output, the hidden-states gradient, the
whole encoder_output gradient (padded keys get zero in both) and every
parameter gradient; key_bias's exact gradient is zero (softmax is
invariant to a per-query shift), so its error is measured against the
value_bias gradient's norm (the query_bias one in self-attention). Rows
of padded decoder tokens (self-attention padding) are left out of the
output and input-gradient comparisons and get a zero output gradient.
Without a recipe (bf16) every error below 1.6e-2 (fc1's gradients 0.1
with ReLU-family activations); under fp8_autocast(DelayedScaling(HYBRID))
after two warm-up steps, output below 0.125 and gradients below 0.25.
Padded queries (TE's mask pair with a query mask): their cross-attention
rows are 0 in the reference too. Also: TE's parameter names and shapes,
the refusals (no encoder_output: ValueError or TypeError; rotary_pos_emb
in cross-attention: NotImplementedError).
"""
import collections
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from gpu_test_support import (  # noqa: E402
    hybrid, perturb, seed_per_test, torch)

import torch.nn.functional as F  # noqa: E402

import tejit.pytorch as te  # noqa: E402

from test_attention_layers import (  # noqa: E402
    BF16, FP8_WARMUP_STEPS, L2_DTYPE, L2_FP8_GRAD, L2_FP8_OUTPUT,
    L2_RELU_FC1, RELU_FAMILY, SEED, activation_ref, block_step,
    check_errors, cross_attention_ref, mha_ref, norm_ref, random_padding,
    rel_l2, rotary_freqs, valid_rows)

HIDDEN, Q_SEQ, BATCH = 256, 64, 2


fresh_seed = seed_per_test(SEED)


# --- reference math ----------------------------------------------------------

# A cross-attention block's configuration, read off the constructor's
# arguments with TE's defaults (not off tejit's module).
CrossSpec = collections.namedtuple(
    "CrossSpec", "hidden heads groups kv_channels qkv_format input_layernorm "
    "normalization eps zero_centered_gamma fused interleaved bias")


def cross_spec(kwargs, decoder=False):
    """The CrossSpec of MultiheadAttention(**kwargs) or, with `decoder`,
    of TransformerLayer(**kwargs).inter_attention (always normed)."""
    hidden, heads = kwargs["hidden_size"], kwargs["num_attention_heads"]
    return CrossSpec(
        hidden=hidden, heads=heads,
        groups=kwargs.get("num_gqa_groups") or heads,
        kv_channels=kwargs.get("kv_channels") or hidden // heads,
        qkv_format=kwargs.get("attn_input_format" if decoder else
                              "qkv_format", "sbhd"),
        input_layernorm=decoder or kwargs.get("input_layernorm", False),
        normalization=kwargs.get("normalization", "LayerNorm"),
        eps=kwargs.get("layernorm_epsilon", 1e-5),
        zero_centered_gamma=kwargs.get("zero_centered_gamma", False),
        fused=kwargs.get("fuse_qkv_params", False),
        interleaved=kwargs.get("qkv_weight_interleaved", True),
        bias=kwargs.get("bias", True))


def cross_parameter_shapes(spec, prefix=""):
    """{TE's parameter name: shape} of a cross MultiheadAttention."""
    q_rows, kv_rows = spec.heads * spec.kv_channels, \
        spec.groups * spec.kv_channels
    shapes = {}
    if spec.input_layernorm:
        group = prefix + "layernorm_query."
        shapes[group + "layer_norm_weight"] = (spec.hidden,)
        if spec.normalization == "LayerNorm":
            shapes[group + "layer_norm_bias"] = (spec.hidden,)
        query = (group + "weight", group + "bias") if spec.fused else \
            (group + "query_weight", group + "query_bias")
    else:
        query = (prefix + "query_layer.weight", prefix + "query_layer.bias")
    kv = prefix + "key_value."
    weights = {query[0]: (q_rows, spec.hidden)}
    biases = {query[1]: (q_rows,)}
    if spec.fused:
        weights[kv + "weight"] = (2 * kv_rows, spec.hidden)
        biases[kv + "bias"] = (2 * kv_rows,)
    else:
        for name in ("key", "value"):
            weights[f"{kv}{name}_weight"] = (kv_rows, spec.hidden)
            biases[f"{kv}{name}_bias"] = (kv_rows,)
    weights[prefix + "proj.weight"] = (spec.hidden, q_rows)
    biases[prefix + "proj.bias"] = (spec.hidden,)
    shapes.update(weights)
    if spec.bias:
        shapes.update(biases)
    return shapes


def check_cross_parameters(module, spec, prefix="", exact=True):
    """TE's names and shapes for the cross block's parameters (all of
    `module`'s with `exact`, else among them)."""
    want = cross_parameter_shapes(spec, prefix)
    got = {n: tuple(p.shape) for n, p in module.named_parameters()}
    missing = sorted(set(want) - set(got))
    assert not missing, f"missing TE parameters {missing}; has {sorted(got)}"
    if exact:
        assert set(got) == set(want), \
            f"parameters beyond TE's: {sorted(set(got) - set(want))}"
    wrong = {n: (got[n], s) for n, s in want.items() if got[n] != s}
    assert not wrong, f"parameter shapes (got, TE's): {wrong}"


def split_key_value(spec, tensor):
    """A fused key_value weight [2*g*d, hidden] or bias [2*g*d] as (key
    part, value part) in TE's row order."""
    if not spec.interleaved:
        return tensor.chunk(2, dim=0)
    trailing = tensor.shape[1:]
    per_group = tensor.view(spec.groups, 2, spec.kv_channels, *trailing)
    return tuple(per_group[:, i].reshape(-1, *trailing) for i in (0, 1))


def cross_projections(spec, p, prefix):
    """((query w, b), (key w, b), (value w, b)) from the parameters `p`
    (name -> float32 tensor); b None without biases."""
    if spec.input_layernorm:
        group = prefix + "layernorm_query."
        names = ("weight", "bias") if spec.fused else ("query_weight",
                                                       "query_bias")
        query = (p[group + names[0]], p.get(group + names[1]))
    else:
        query = (p[prefix + "query_layer.weight"],
                 p.get(prefix + "query_layer.bias"))
    kv = prefix + "key_value."
    if spec.fused:
        weights = split_key_value(spec, p[kv + "weight"])
        biases = (split_key_value(spec, p[kv + "bias"]) if kv + "bias" in p
                  else (None, None))
        return query, (weights[0], biases[0]), (weights[1], biases[1])
    key, value = ((p[f"{kv}{n}_weight"], p.get(f"{kv}{n}_bias"))
                  for n in ("key", "value"))
    return query, key, value


def cross_mha_ref(spec, x, enc, p, mask_type, kv_padding, prefix="",
                  q_padding=None):
    """A cross MultiheadAttention in float32: (output incl. proj bias,
    the query norm's output or None). `kv_padding` [b, 1, 1, s_kv] (True
    = padded key) and `q_padding` [b, 1, 1, s_q] (True = padded query,
    whose attention row is 0, as in TE; or None) apply when `mask_type`
    has "padding"."""
    ln = None
    if spec.input_layernorm:
        group = prefix + "layernorm_query."
        ln = norm_ref(x, p[group + "layer_norm_weight"],
                      p.get(group + "layer_norm_bias"), spec.normalization,
                      spec.eps, spec.zero_centered_gamma)
    query, key, value = cross_projections(spec, p, prefix)
    q = F.linear(ln if ln is not None else x, *query)
    k, v = F.linear(enc, *key), F.linear(enc, *value)
    q = q.view(*q.shape[:2], spec.heads, spec.kv_channels)
    k = k.view(*k.shape[:2], spec.groups, spec.kv_channels)
    v = v.view(*v.shape[:2], spec.groups, spec.kv_channels)
    attn = cross_attention_ref(
        q, k, v, "causal" in mask_type,
        kv_padding if "padding" in mask_type else None, spec.qkv_format,
        1.0 / math.sqrt(spec.kv_channels))
    if q_padding is not None and "padding" in mask_type:
        attn = attn * valid_rows(q_padding, spec.qkv_format)
    out = F.linear(attn, p[prefix + "proj.weight"],
                   p.get(prefix + "proj.bias"))
    return out, ln


def mlp_residual_ref(layer, hidden, p):
    """TransformerLayer's last block in float32: (its norm of `hidden` if
    post-LN residual, else `hidden`) + LayerNormMLP(hidden)."""
    ln = norm_ref(hidden, p["layernorm_mlp.layer_norm_weight"],
                  p.get("layernorm_mlp.layer_norm_bias"), layer.normalization,
                  layer.layernorm_epsilon, layer.zero_centered_gamma)
    fc1 = F.linear(ln, p["layernorm_mlp.fc1_weight"],
                   p.get("layernorm_mlp.fc1_bias"))
    mlp = F.linear(activation_ref(fc1, layer.activation),
                   p["layernorm_mlp.fc2_weight"],
                   p.get("layernorm_mlp.fc2_bias"))
    post = layer.apply_residual_connection_post_layernorm
    return (ln if post else hidden) + mlp


def decoder_ref(layer, spec, x, enc, p, masks, freqs):
    """TE's decoder TransformerLayer in float32. masks: (self mask type,
    self padding or None, cross mask type, key padding or None[, query
    padding of the cross-attention]); rotary (`freqs` or None) on the
    self-attention only."""
    self_mask, self_padding, cross_mask, kv_padding, *q_padding = masks
    post = layer.apply_residual_connection_post_layernorm
    attn, ln = mha_ref(layer.self_attention, x, p, self_mask, self_padding,
                       freqs, prefix="self_attention.")
    hidden = (ln if post else x) + attn
    cross, lnq = cross_mha_ref(spec, hidden, enc, p, cross_mask, kv_padding,
                               prefix="inter_attention.",
                               q_padding=(q_padding or [None])[0])
    hidden = (lnq if post else hidden) + cross
    return mlp_residual_ref(layer, hidden, p)


# --- the step and its comparison ---------------------------------------------


def block_inputs(fmt, kv_seq):
    """bf16 hidden states [s_q, b, hidden] and encoder output [s_kv, b,
    hidden] ([b, s, hidden] in bshd), both requiring gradients."""
    def lead(seq):
        return (seq, BATCH) if fmt == "sbhd" else (BATCH, seq)
    return tuple(torch.randn(*lead(seq), HIDDEN, device="cuda", dtype=BF16,
                             requires_grad=True) for seq in (Q_SEQ, kv_seq))


def mask_argument(kv_padding, form):
    """The key padding as forward takes it: TE's pair (query mask, all
    False; key/value mask) with form "pair", the key/value mask alone with
    "kv"."""
    if form == "kv":
        return kv_padding
    queries = torch.zeros(BATCH, 1, 1, Q_SEQ, dtype=torch.bool,
                          device="cuda")
    return queries, kv_padding


def key_bias_scale_name(name):
    """The parameter whose gradient's norm measures `name`'s gradient error
    when its exact gradient is zero (a key bias), else None."""
    if not name.endswith("key_bias"):
        return None
    stem = name[:-len("key_bias")]
    return stem + ("value_bias" if name.endswith("key_value.key_bias")
                   else "query_bias")


def parameter_grad_errors(grads, params, what):
    """{name: relative L2 error of its gradient} (see key_bias_scale_name)."""
    errors = {}
    for name, grad in grads.items():
        assert grad is not None, f"{what}: no gradient for {name}"
        want = params[name].grad
        scale_name = key_bias_scale_name(name)
        if scale_name is None:
            errors[name] = rel_l2(grad, want)
        else:
            scale = params[scale_name].grad.double().norm().clamp_min(1e-30)
            errors[name] = ((grad.double() - want.double()).norm()
                            / scale).item()
    return errors


def error_bounds(errors, fp8, activation=""):
    """The bounds of test_attention_layers.check_block for `errors`."""
    if fp8:
        limits = dict.fromkeys(errors, L2_FP8_GRAD)
        limits["output"] = L2_FP8_OUTPUT
        return limits
    limits = dict.fromkeys(errors, L2_DTYPE[BF16])
    if activation in RELU_FAMILY:  # see check_block
        limits.update((n, L2_RELU_FC1) for n in errors if "fc1_" in n)
    return limits


def check_cross_block(module, reference, x, enc, call, fp8, what, rows=None,
                      activation=""):
    """One training step of module(x, encoder_output=enc, **call) (after
    the FP8 warm-up) against reference(x32, enc32, params) in float32:
    output and input gradient on `rows` ([s, b, 1] / [b, s, 1], 1 on the
    compared tokens; all when None), the encoder_output gradient, every
    parameter gradient."""
    fp8_recipe = hybrid() if fp8 else None
    if rows is None:
        rows = torch.ones(*x.shape[:2], 1, device="cuda")
    dy = (torch.randn(x.shape, device="cuda") * rows).to(BF16)
    for _ in range(FP8_WARMUP_STEPS + 1 if fp8 else 1):
        enc.grad = None  # block_step resets x.grad and the parameters'
        out = block_step(module, x, fp8_recipe, dy, encoder_output=enc,
                         **call)
    assert out.shape == x.shape and out.dtype == BF16, \
        f"{what}: output {tuple(out.shape)} {out.dtype}"
    assert enc.grad is not None, f"{what}: no gradient reaches encoder_output"
    grads = {n: p.grad for n, p in module.named_parameters()}

    params = {n: p.detach().float().requires_grad_()
              for n, p in module.named_parameters()}
    x32, enc32 = (t.detach().float().requires_grad_() for t in (x, enc))
    ref = reference(x32, enc32, params)
    ref.backward(dy.float())
    errors = {"output": rel_l2(out * rows, ref * rows),
              "input grad": rel_l2(x.grad * rows, x32.grad * rows),
              "encoder_output grad": rel_l2(enc.grad, enc32.grad)}
    errors.update(parameter_grad_errors(grads, params, what))
    check_errors(errors, error_bounds(errors, fp8, activation), what)
    return errors


# --- MultiheadAttention(attention_type="cross") ------------------------------

# name: (constructor arguments, s_kv, key padding form ("pair" / "kv"));
# the mask type is TE's default "causal" unless given.
MHA_CROSS_CASES = {
    "LayerNorm-causal-sbhd-gqa": (dict(
        num_attention_heads=8, num_gqa_groups=2, input_layernorm=True),
        96, None),
    "no-layernorm-no_mask-bshd-nobias": (dict(
        num_attention_heads=4, input_layernorm=False, bias=False,
        qkv_format="bshd", attn_mask_type="no_mask"), 160, None),
    "RMSNorm-padding-pair-mask": (dict(
        num_attention_heads=4, input_layernorm=True, normalization="RMSNorm",
        attn_mask_type="padding"), 160, "pair"),
    "fused-interleaved-gqa-padding_causal-kv-mask": (dict(
        num_attention_heads=8, num_gqa_groups=4, kv_channels=64,
        fuse_qkv_params=True, input_layernorm=True, qkv_format="bshd",
        attn_mask_type="padding_causal"), 96, "kv"),
    # As many keys as queries: the mask still pads the keys alone.
    "equal-lengths-padding-kv-mask": (dict(
        num_attention_heads=4, input_layernorm=True,
        attn_mask_type="padding"), Q_SEQ, "kv"),
    "fused-not-interleaved-no-layernorm": (dict(
        num_attention_heads=8, num_gqa_groups=2, fuse_qkv_params=True,
        qkv_weight_interleaved=False, attn_mask_type="no_mask"), 96, None),
}


def cross_mha(**kwargs):
    """A bf16 cross MultiheadAttention (hidden 256, no dropout), perturbed."""
    mha = te.MultiheadAttention(HIDDEN, attention_type="cross",
                                attention_dropout=0.0, params_dtype=BF16,
                                **kwargs)
    perturb(mha)
    return mha


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("case", list(MHA_CROSS_CASES))
def test_cross_multihead_attention(case, fp8):
    kwargs, kv_seq, mask_form = MHA_CROSS_CASES[case]
    mha = cross_mha(**kwargs)
    spec = cross_spec(dict(kwargs, hidden_size=HIDDEN))
    check_cross_parameters(mha, spec)
    mask = kwargs.get("attn_mask_type", "causal")
    x, enc = block_inputs(spec.qkv_format, kv_seq)
    kv_padding = (random_padding(BATCH, kv_seq, "cuda") if "padding" in mask
                  else None)
    call = ({} if kv_padding is None else
            {"attention_mask": mask_argument(kv_padding, mask_form)})

    def reference(x32, enc32, params):
        return cross_mha_ref(spec, x32, enc32, params, mask, kv_padding)[0]

    check_cross_block(mha, reference, x, enc, call, fp8,
                      f"cross MultiheadAttention {case} "
                      f"{'fp8' if fp8 else 'bf16'}")


# --- TransformerLayer(layer_type="decoder") ----------------------------------

# name: (constructor arguments, s_kv, key padding form, rotary); the
# self-attention mask is TE's default "causal" and the cross-attention's
# "no_mask" unless given.
DECODER_CASES = {
    "default": (dict(hidden_size=HIDDEN, ffn_hidden_size=1024,
                     num_attention_heads=4), 96, None, False),
    "llama-like-bshd": (dict(
        hidden_size=HIDDEN, ffn_hidden_size=512, num_attention_heads=8,
        num_gqa_groups=2, normalization="RMSNorm", activation="swiglu",
        bias=False, attn_input_format="bshd",
        self_attn_mask_type="padding_causal",
        enc_dec_attn_mask_type="padding"), 160, "pair", True),
    "post-ln-residual-zero-gamma-relu-cross-causal": (dict(
        hidden_size=HIDDEN, ffn_hidden_size=1024, num_attention_heads=4,
        apply_residual_connection_post_layernorm=True,
        zero_centered_gamma=True, activation="relu",
        self_attn_mask_type="no_mask", enc_dec_attn_mask_type="causal"),
        96, None, False),
    "fused-qkv-gqa-padding": (dict(
        hidden_size=HIDDEN, ffn_hidden_size=1024, num_attention_heads=8,
        num_gqa_groups=4, fuse_qkv_params=True, self_attn_mask_type="padding",
        enc_dec_attn_mask_type="padding_causal"), 160, "kv", False),
}


def decoder_layer(**kwargs):
    """A bf16 decoder TransformerLayer without dropout, perturbed."""
    layer = te.TransformerLayer(layer_type="decoder", hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=BF16,
                                **kwargs)
    perturb(layer)
    return layer


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("case", list(DECODER_CASES))
def test_decoder_transformer_layer(case, fp8):
    kwargs, kv_seq, mask_form, rotary = DECODER_CASES[case]
    layer = decoder_layer(**kwargs)
    spec = cross_spec(kwargs, decoder=True)
    check_cross_parameters(layer, spec, prefix="inter_attention.",
                           exact=False)
    self_mask = kwargs.get("self_attn_mask_type", "causal")
    cross_mask = kwargs.get("enc_dec_attn_mask_type", "no_mask")
    x, enc = block_inputs(spec.qkv_format, kv_seq)
    self_padding = (random_padding(BATCH, Q_SEQ, "cuda")
                    if "padding" in self_mask else None)
    kv_padding = (random_padding(BATCH, kv_seq, "cuda")
                  if "padding" in cross_mask else None)
    freqs = rotary_freqs(Q_SEQ, spec.kv_channels, "cuda") if rotary else None
    call, rows = {}, None
    if self_padding is not None:
        call["attention_mask"] = self_padding
        rows = valid_rows(self_padding, spec.qkv_format)
    if kv_padding is not None:
        call["enc_dec_attn_mask"] = mask_argument(kv_padding, mask_form)
    if freqs is not None:
        call["rotary_pos_emb"] = freqs
    masks = (self_mask, self_padding, cross_mask, kv_padding)

    def reference(x32, enc32, params):
        return decoder_ref(layer, spec, x32, enc32, params, masks, freqs)

    check_cross_block(layer, reference, x, enc, call, fp8,
                      f"decoder TransformerLayer {case} "
                      f"{'fp8' if fp8 else 'bf16'}", rows=rows,
                      activation=kwargs.get("activation", "gelu"))


@pytest.mark.parametrize("fused", [False, True], ids=["split", "fused"])
def test_decoder_state_dict_names(fused):
    """The decoder's state_dict holds TE's names: the self-attention's,
    inter_attention's (layernorm_query, key_value, proj) and the MLP's."""
    kwargs = dict(hidden_size=HIDDEN, ffn_hidden_size=1024,
                  num_attention_heads=8, num_gqa_groups=2,
                  fuse_qkv_params=fused)
    layer = decoder_layer(**kwargs)
    names = set(layer.state_dict())
    want = set(cross_parameter_shapes(cross_spec(kwargs, decoder=True),
                                      prefix="inter_attention."))
    want |= {"self_attention.layernorm_qkv.layer_norm_weight",
             "self_attention.proj.weight", "layernorm_mlp.fc1_weight",
             "layernorm_mlp.fc2_weight"}
    assert want <= names, f"missing: {sorted(want - names)}"


# --- refusals ----------------------------------------------------------------

BLOCKS = ["mha", "decoder"]


def cross_block(kind, mask="no_mask"):
    """A small cross MultiheadAttention ("mha") or decoder TransformerLayer
    with cross-attention mask type `mask`."""
    if kind == "mha":
        return cross_mha(num_attention_heads=4, input_layernorm=True,
                         attn_mask_type=mask)
    return decoder_layer(hidden_size=HIDDEN, ffn_hidden_size=1024,
                         num_attention_heads=4, enc_dec_attn_mask_type=mask)


@pytest.mark.parametrize("kind", BLOCKS)
def test_cross_block_needs_encoder_output(kind):
    block = cross_block(kind)
    x, _ = block_inputs("sbhd", 96)
    with pytest.raises((ValueError, TypeError)):
        block(x)


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
@pytest.mark.parametrize("kind", BLOCKS)
def test_cross_block_padded_queries(kind, fp8):
    """A mask pair that pads queries too (TE's decoder batches): their
    cross-attention rows are 0 (and give no gradient), everything else as
    the composition, every gradient compared."""
    mask = "padding_causal" if kind == "mha" else "padding"
    block = cross_block(kind, mask)
    x, enc = block_inputs("sbhd", 96)
    kv_padding = random_padding(BATCH, 96, "cuda")
    q_padding = random_padding(BATCH, Q_SEQ, "cuda")
    mask_name = "attention_mask" if kind == "mha" else "enc_dec_attn_mask"
    call = {mask_name: (q_padding, kv_padding)}
    if kind == "mha":
        spec = cross_spec(dict(hidden_size=HIDDEN, num_attention_heads=4,
                               input_layernorm=True))

        def reference(x32, enc32, params):
            return cross_mha_ref(spec, x32, enc32, params, mask, kv_padding,
                                 q_padding=q_padding)[0]
    else:
        spec = cross_spec(dict(hidden_size=HIDDEN, num_attention_heads=4),
                          decoder=True)
        masks = ("causal", None, mask, kv_padding, q_padding)

        def reference(x32, enc32, params):
            return decoder_ref(block, spec, x32, enc32, params, masks, None)
    check_cross_block(block, reference, x, enc, call, fp8,
                      f"{kind} padded queries {'fp8' if fp8 else 'bf16'}")


def test_cross_attention_refuses_rotary():
    """Rotary embeddings in cross-attention: NotImplementedError naming
    them (in the decoder they go to the self-attention only: see the
    llama-like case)."""
    mha = cross_block("mha")
    x, enc = block_inputs("sbhd", 96)
    freqs = rotary_freqs(Q_SEQ, HIDDEN // 4, "cuda")
    with pytest.raises(NotImplementedError, match="rotary"):
        mha(x, encoder_output=enc, rotary_pos_emb=freqs)


def test_decoder_full_size_fp8_step():
    """A decoder at the quickstart's size (hidden 4096, FFN 16384, 32
    heads; 2048 queries over a 1024-token encoder output whose keys are
    padded, batch 2): one FP8 step against the float32 composition, the
    FP8 bounds, on every gradient."""
    kwargs = dict(hidden_size=4096, ffn_hidden_size=16384,
                  num_attention_heads=32, enc_dec_attn_mask_type="padding")
    layer = decoder_layer(**kwargs)
    spec = cross_spec(kwargs, decoder=True)
    seq, kv_seq, batch = 2048, 1024, 2
    x, enc = (torch.randn(s, batch, 4096, device="cuda", dtype=BF16,
                          requires_grad=True) for s in (seq, kv_seq))
    kv_padding = torch.zeros(batch, 1, 1, kv_seq, dtype=torch.bool,
                             device="cuda")
    kv_padding[1, ..., kv_seq * 3 // 4:] = True
    masks = ("causal", None, "padding", kv_padding)

    def reference(x32, enc32, params):
        return decoder_ref(layer, spec, x32, enc32, params, masks, None)

    errors = check_cross_block(
        layer, reference, x, enc, {"enc_dec_attn_mask": kv_padding}, True,
        "decoder TransformerLayer full size fp8")
    print(f"full-size decoder FP8 step: output {errors['output']:.4f}, "
          f"input grad {errors['input grad']:.4f}, encoder_output grad "
          f"{errors['encoder_output grad']:.4f}")
