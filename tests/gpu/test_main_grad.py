"""GPU tests of fuse_wgrad_accumulation (Megatron-LM's gradient
accumulation fusion, as Transformer Engine's modules offer it).

    PYTHONPATH=python python3 -m pytest tests/gpu/test_main_grad.py

With fuse_wgrad_accumulation=True every GEMM weight's gradient is added to
its float32 `.main_grad` inside the wgrad GEMM (cuBLASLt's C, beta 1) and
autograd gets TE's placeholder (or None). Checked, on fresh random data
over two micro-batches and from a nonzero main_grad:
- no recipe: main_grad against main_grad + the float64 product dY^T X of
  the same bf16 tensors (relative L2 below 1e-4: a bf16 rounding of the
  wgrad on the way, as the unfused path has, is ~2e-3, so the test sees
  whether the sum is taken in float32);
- FP8 (DelayedScaling HYBRID, Float8CurrentScaling): main_grad against
  main_grad + the sum of an unfused twin's weight gradients (the same FP8
  GEMMs, their results rounded to bf16: relative L2 below 1e-2), and every
  other gradient (input, biases, norm weights) equal to the twin's bit for
  bit;
- split (TE's default) and interleaved QKV weights, their main_grads
  separate tensors or views of one buffer, and weights cast by
  torch.autocast;
- bfloat16 and float16 main_grads (main_grad_dtype): the wgrad GEMM adds
  into them before its one rounding: against float64 sums (no recipe) and
  the twin's FP8 gradients, within a few of their roundings;
- TE's .grad convention (`grad_added_to_main_grad`, `zero_out_wgrad`), a
  frozen weight, graphed steps, and the errors: no main_grad, main_grads
  of mixed or unsupported dtypes.
Sizes: small layers, and the quickstart LayerNormMLP (hidden 4096, FFN
16384, 8192 tokens) under FP8.
"""
import copy

import pytest

from gpu_test_support import (hybrid, input_gradient, perturb,
                              run_seed, torch)

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

SEED = run_seed("test_main_grad")
BF16 = torch.bfloat16


def rel_l2(got, want):
    got, want = got.double(), want.double()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def gemm_weights(module):
    """The weights whose gradients go to main_grad: the 2-D parameters."""
    return {name: p for name, p in module.named_parameters() if p.dim() == 2}


def twins(make, placeholder=True, one_buffer=False, dtype=torch.float32):
    """(fused module with main_grads, unfused twin with the same
    parameters). `placeholder`: Megatron's grad_added_to_main_grad
    attribute on the fused module's weights. `one_buffer`: the main_grads
    are views of one `dtype` buffer, in parameter order (Megatron's
    contiguous gradient buffer), else `dtype` tensors of their own."""
    torch.manual_seed(SEED)
    fused = make(True)
    perturb(fused)
    plain = make(False)
    plain.load_state_dict(fused.state_dict())
    weights = list(gemm_weights(fused).values())
    views = None
    if one_buffer:
        flat = torch.randn(sum(p.numel() for p in weights), dtype=dtype,
                           device="cuda")
        views = flat.split([p.numel() for p in weights])
    for index, p in enumerate(weights):
        p.main_grad = (views[index].view(p.shape) if one_buffer else
                       torch.randn(p.shape, dtype=dtype, device=p.device))
        if placeholder:
            p.grad_added_to_main_grad = False
    return fused, plain


def run_twins(make, shape, fp8_recipe, steps=2, one_buffer=False,
              dtype=torch.float32, io_dtype=BF16):
    """Both modules through the same micro-batches (`io_dtype` inputs);
    checks everything but main_grad and returns (fused, plain, initial
    main_grads, inputs and output gradients)."""
    fused, plain = twins(make, one_buffer=one_buffer, dtype=dtype)
    start = {n: p.main_grad.clone() for n, p in gemm_weights(fused).items()}
    batches = []
    for _ in range(steps):
        x = torch.randn(*shape, device="cuda", dtype=io_dtype)
        dy = torch.randn(*shape[:-1], fused_out_features(fused, shape),
                         device="cuda", dtype=io_dtype)
        batches.append((x, dy))
        got = input_gradient(fused, x, dy, fp8_recipe)
        want = input_gradient(plain, x, dy, fp8_recipe)
        assert torch.equal(got, want), "input gradient differs from the twin"
    plain_params = dict(plain.named_parameters())
    for name, p in fused.named_parameters():
        if p.dim() == 2:
            assert p.grad_added_to_main_grad, name
            assert p.grad is not None and p.grad.shape == p.shape, name
        else:
            assert torch.equal(p.grad, plain_params[name].grad), \
                f"gradient of {name} differs from the unfused twin's"
    return fused, plain, start, batches


def fused_out_features(module, shape):
    return getattr(module, "out_features", shape[-1])


LAYERS = {
    "Linear": (lambda fuse: te.Linear(256, 128, params_dtype=BF16,
                                      fuse_wgrad_accumulation=fuse),
               (64, 256)),
    "LayerNormLinear": (lambda fuse: te.LayerNormLinear(
        256, 128, params_dtype=BF16, fuse_wgrad_accumulation=fuse),
        (64, 256)),
    "LayerNormMLP": (lambda fuse: te.LayerNormMLP(
        256, 1024, params_dtype=BF16, fuse_wgrad_accumulation=fuse),
        (64, 256)),
    # The QKV weight as the program takes it (rows q | k | v).
    "TransformerLayer": (lambda fuse: te.TransformerLayer(
        256, 1024, 4, params_dtype=BF16, hidden_dropout=0.0,
        attention_dropout=0.0, fuse_qkv_params=True,
        qkv_weight_interleaved=False, fuse_wgrad_accumulation=fuse),
        (128, 2, 256)),
    # TE's defaults: query_weight, key_weight, value_weight (GQA: 2 groups),
    # whose main_grads the program takes joined.
    "TransformerLayer-split": (lambda fuse: te.TransformerLayer(
        256, 1024, 4, num_gqa_groups=2, params_dtype=BF16,
        hidden_dropout=0.0, attention_dropout=0.0,
        fuse_wgrad_accumulation=fuse), (128, 2, 256)),
    # A fused weight interleaved by key/value group: reordered main_grad.
    "MultiheadAttention-interleaved": (lambda fuse: te.MultiheadAttention(
        256, 4, num_gqa_groups=2, params_dtype=BF16, attention_dropout=0.0,
        fuse_qkv_params=True, input_layernorm=True,
        fuse_wgrad_accumulation=fuse), (128, 2, 256)),
}
RECIPES = {"delayed": hybrid,
           "current": lambda: recipe.Float8CurrentScaling(
               fp8_format=recipe.Format.HYBRID)}


@pytest.mark.parametrize("layer", list(LAYERS))
@pytest.mark.parametrize("fp8", list(RECIPES))
def test_fp8_main_grad_is_the_sum_of_the_twins_gradients(layer, fp8):
    make, shape = LAYERS[layer]
    fused, plain, start, _ = run_twins(make, shape, RECIPES[fp8]())
    # The twin's gradients were summed over the micro-batches in .grad
    # (bf16); the fused module's went into main_grad in float32.
    plain_params = dict(plain.named_parameters())
    for name, p in gemm_weights(fused).items():
        want = start[name] + plain_params[name].grad.float()
        error = rel_l2(p.main_grad - start[name], want - start[name])
        assert error < 1e-2, f"{layer} {fp8}: main_grad of {name}: {error}"


@pytest.mark.parametrize("one_buffer", [False, True],
                         ids=["own-tensors", "one-buffer"])
@pytest.mark.parametrize("layer", ["TransformerLayer-split",
                                   "MultiheadAttention-interleaved"])
def test_main_grad_of_qkv_parts(layer, one_buffer):
    """Split and interleaved QKV weights: main_grads joined or reordered
    for the program and written back (a view of one buffer: in place)."""
    make, shape = LAYERS[layer]
    fused, plain, start, _ = run_twins(make, shape, hybrid(),
                                       one_buffer=one_buffer)
    plain_params = dict(plain.named_parameters())
    for name, p in gemm_weights(fused).items():
        want = plain_params[name].grad.float()
        error = rel_l2(p.main_grad - start[name], want)
        assert error < 1e-2, f"{layer}: main_grad of {name}: {error}"


def test_autocast_cast_weights():
    """float32 weights that torch.autocast casts to bf16 for the program:
    the gradient of the cast copy goes into the weight's main_grad."""
    make = lambda fuse: te.Linear(  # noqa: E731
        256, 128, params_dtype=torch.float32, fuse_wgrad_accumulation=fuse)
    fused, plain = twins(make)
    start = fused.weight.main_grad.clone()
    x = torch.randn(64, 256, device="cuda")
    dy = torch.randn(64, 128, device="cuda", dtype=BF16)
    for module in (fused, plain):
        with torch.autocast("cuda", dtype=BF16):
            out = module(x.requires_grad_())
        out.backward(dy)
    error = rel_l2(fused.weight.main_grad - start, plain.weight.grad)
    assert error < 1e-2, f"main_grad under autocast: {error}"
    assert torch.equal(fused.bias.grad, plain.bias.grad)


def test_bf16_main_grad_is_summed_in_float32():
    make, shape = LAYERS["Linear"]
    fused, _, start, batches = run_twins(make, shape, None)
    want = start["weight"].double()
    for x, dy in batches:
        want += dy.double().t() @ x.double()
    error = rel_l2(fused.weight.main_grad - start["weight"],
                   want - start["weight"].double())
    assert error < 1e-4, f"main_grad against float64: {error}"


LOW_PRECISION = {
    # bf16 main_grads of bf16 weights; fp16 ones of fp16 weights (Megatron
    # keeps fp16 main_grads unless told to accumulate in float32).
    "bf16": (BF16, BF16, 2e-2), "fp16": (torch.float16, torch.float16, 4e-3)}


@pytest.mark.parametrize("dtype", list(LOW_PRECISION))
@pytest.mark.parametrize("layer", ["Linear", "LayerNormMLP",
                                   "TransformerLayer-split"])
def test_low_precision_main_grad(layer, dtype):
    """main_grads in bf16/fp16: no recipe against main_grad + the float64
    sums of dY^T X (Linear) or the twin's gradients; FP8 against the
    twin's. The wgrad GEMM adds main_grad as C and rounds once per
    micro-batch, so the totals are within a few of their roundings."""
    torch_dtype, io_dtype, bound = LOW_PRECISION[dtype]
    make, shape = LAYERS[layer]
    if torch_dtype == torch.float16:
        if layer != "Linear":
            pytest.skip("fp16 main_grads: the Linear suffices")
        make = lambda fuse: te.Linear(  # noqa: E731
            256, 128, params_dtype=torch.float16,
            fuse_wgrad_accumulation=fuse)
    for fp8_recipe in (None, hybrid()):
        fused, plain, start, batches = run_twins(
            make, shape, fp8_recipe, dtype=torch_dtype, io_dtype=io_dtype)
        plain_params = dict(plain.named_parameters())
        for name, p in gemm_weights(fused).items():
            assert p.main_grad.dtype == torch_dtype
            if fp8_recipe is None and layer == "Linear":
                want = start[name].double()
                for x, dy in batches:
                    want += dy.double().t() @ x.double()
            else:
                want = start[name].double() + plain_params[name].grad.double()
            error = rel_l2(p.main_grad, want)
            assert error < bound, (f"{layer} {dtype} "
                                   f"{'fp8' if fp8_recipe else 'no recipe'}: "
                                   f"main_grad of {name}: {error}")
            # Not left as it was: the gradients went in.
            assert rel_l2(p.main_grad, start[name]) > 10 * error


def test_grad_conventions():
    """TE's: with grad_added_to_main_grad the weight's .grad is a
    placeholder (zeros with zero_out_wgrad); without it, no .grad. A
    frozen weight gets no gradient and needs no main_grad."""
    make, shape = LAYERS["LayerNormMLP"]
    fused, _ = twins(make, placeholder=False)
    fused.fc2_weight.grad_added_to_main_grad = False
    fused.fc2_weight.zero_out_wgrad = True
    before = fused.fc1_weight.main_grad.clone()
    x = torch.randn(*shape, device="cuda", dtype=BF16)
    input_gradient(fused, x, torch.randn_like(x), hybrid())
    assert fused.fc1_weight.grad is None
    assert not torch.equal(fused.fc1_weight.main_grad, before)
    assert fused.fc2_weight.grad_added_to_main_grad
    assert torch.count_nonzero(fused.fc2_weight.grad) == 0

    fused.fc1_weight.requires_grad_(False)
    del fused.fc1_weight.main_grad
    input_gradient(fused, x, torch.randn_like(x), hybrid())
    assert fused.fc1_weight.grad is None


def test_errors():
    make, shape = LAYERS["Linear"]
    x = torch.randn(*shape, device="cuda", dtype=BF16)
    module, _ = twins(make)
    del module.weight.main_grad
    with pytest.raises(RuntimeError, match="no .main_grad"):
        input_gradient(module, x,
                       torch.randn(64, 128, device="cuda", dtype=BF16), None)
    module.weight.main_grad = torch.zeros(128, 256, device="cuda",
                                          dtype=torch.float64)
    with pytest.raises(RuntimeError, match="share one dtype"):
        input_gradient(module, x,
                       torch.randn(64, 128, device="cuda", dtype=BF16), None)
    mlp, _ = twins(LAYERS["LayerNormMLP"][0])
    mlp.fc2_weight.main_grad = mlp.fc2_weight.main_grad.to(BF16)
    with pytest.raises(RuntimeError, match="share one dtype"):
        input_gradient(mlp, x, torch.randn_like(x), None)


def test_layernorm_mlp_full_size():
    """The quickstart LayerNormMLP under FP8: one micro-batch on a nonzero
    main_grad, against the twin."""
    make = lambda fuse: te.LayerNormMLP(  # noqa: E731
        4096, 16384, params_dtype=BF16, fuse_wgrad_accumulation=fuse)
    fused, plain, start, _ = run_twins(make, (8192, 4096), hybrid(),
                                       steps=1)
    plain_params = dict(plain.named_parameters())
    for name, p in gemm_weights(fused).items():
        error = rel_l2(p.main_grad - start[name],
                       plain_params[name].grad.float())
        assert error < 1e-2, f"main_grad of {name}: {error}"


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_graphed_steps_accumulate_like_eager(fp8):
    """make_graphed_callables (Megatron-LM's CUDA graphs): the captured
    backward adds into the same main_grad tensors, so replays accumulate
    exactly as eager steps of a twin do."""
    fp8_recipe = hybrid() if fp8 else None
    make, shape = LAYERS["LayerNormMLP"]
    torch.manual_seed(SEED)
    eager = make(True)
    perturb(eager)
    graphed = copy.deepcopy(eager)
    for module in (eager, graphed):
        for p in gemm_weights(module).values():
            p.main_grad = torch.zeros(p.shape, dtype=torch.float32,
                                      device="cuda")
            p.grad_added_to_main_grad = False
    sample = torch.randn(*shape, device="cuda", dtype=BF16,
                         requires_grad=True)
    graphed = te.make_graphed_callables(graphed, (sample,),
                                        fp8_enabled=fp8,
                                        fp8_recipe=fp8_recipe)
    # The capture's warm-up ran backwards: start both from zero again.
    for module in (eager, graphed):
        for p in gemm_weights(module).values():
            p.main_grad.zero_()
    for _ in range(3):
        x = torch.randn(*shape, device="cuda", dtype=BF16)
        dy = torch.randn_like(x)
        for module in (eager, graphed):
            module.zero_grad(set_to_none=True)
            input_gradient(module, x, dy, fp8_recipe)
    eager_weights = gemm_weights(eager)
    for name, p in gemm_weights(graphed).items():
        assert torch.count_nonzero(p.main_grad) > 0, name
        assert torch.equal(p.main_grad, eager_weights[name].main_grad), \
            f"main_grad of {name} after 3 replays"
