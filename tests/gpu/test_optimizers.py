"""GPU tests of tejit.pytorch.optimizers (TE's FusedAdam / FusedSGD) with
FP8 primary weights (fp8_model_init's te.Float8Tensor parameters):

    PYTHONPATH=python python3 -m pytest tests/gpu/test_optimizers.py

On fresh random data, a LayerNormMLP built inside
fp8_model_init(preserve_high_precision_init_val=True) trains under
fp8_autocast with FusedAdam(master_weights=True):
- each master weight starts from the kept high-precision initial value
  (not from the FP8 one), and the kept value is dropped, as in TE;
- after each step every master weight equals a float64 Adam step over the
  gradients the module produced (relative L2 < 1e-6), and the FP8
  parameter is the master quantized with the parameter's own scale
  (dequantized within half an E4M3 step of it), its transpose refreshed;
- without master weights (FusedAdam, FusedSGD) the FP8 parameter after a
  step is its dequantized value's step, quantized;
- the loss falls over the steps.
The CPU tests (tests/python/test_pytorch_optimizers.py) check the update
rules against float64 for plain parameters.
"""
import math

import pytest

from gpu_test_support import hybrid, run_seed, seed_per_test, torch

import tejit.pytorch as te  # noqa: E402
from tejit.pytorch.optimizers import FusedAdam, FusedSGD  # noqa: E402

SEED = run_seed("test_optimizers")
fresh_seed = seed_per_test(SEED)
BF16 = torch.bfloat16


def fp8_mlp(preserve=True):
    with te.fp8_model_init(enabled=True, recipe=hybrid(),
                           preserve_high_precision_init_val=preserve):
        return te.LayerNormMLP(256, 1024, params_dtype=BF16)


def fp8_params(module):
    return [p for p in module.parameters() if isinstance(p, te.Float8Tensor)]


def train_step(module, opt, x, target):
    opt.zero_grad()
    with te.fp8_autocast(enabled=True, fp8_recipe=hybrid()):
        out = module(x)
    loss = (out.float() - target).pow(2).mean()
    loss.backward()
    grads = {p: p.grad.detach().double().clone() for p in module.parameters()
             if p.grad is not None}
    opt.step()
    return loss.item(), grads


def check_quantized_from(p, master):
    """The FP8 parameter is `master` quantized: within half an E4M3 step
    (2^-4 relative, plus the smallest subnormal) of it."""
    got = p.dequantize(torch.float32)
    want = master.float()
    bound = want.abs() * 2.0 ** -4 + float(p._scale_inv) * 2.0 ** -9
    assert bool(((got - want).abs() <= bound).all()), \
        "the FP8 parameter is not its master weight quantized"
    if p._store.transpose is not None:
        assert torch.equal(p._store.transpose.view(torch.uint8),
                           p._data.view(torch.uint8).t().contiguous())


def test_fused_adam_master_weights_over_fp8_parameters():
    module = fp8_mlp()
    initial = {p: p.get_high_precision_init_val().clone()
               for p in fp8_params(module)}
    assert initial, "fp8_model_init made no Float8Tensor"
    lr, betas, eps, wd = 1e-3, (0.9, 0.95), 1e-8, 0.01
    opt = FusedAdam(module.parameters(), lr=lr, betas=betas, eps=eps,
                    weight_decay=wd, master_weights=True)
    x = torch.randn(512, 256, device="cuda", dtype=BF16)
    target = torch.randn(512, 256, device="cuda")
    reference = {p: (v.double().cuda(), torch.zeros_like(v, dtype=torch.float64,
                                                          device="cuda"),
                     torch.zeros_like(v, dtype=torch.float64, device="cuda"))
                 for p, v in initial.items()}
    losses = []
    for t in range(1, 6):
        loss, grads = train_step(module, opt, x, target)
        losses.append(loss)
        for p in fp8_params(module):
            if t == 1:
                assert p.get_high_precision_init_val() is None, \
                    "the kept initial value was not dropped"
            value, m, v = reference[p]
            g = grads[p]
            m.mul_(betas[0]).add_(g, alpha=1 - betas[0])
            v.mul_(betas[1]).addcmul_(g, g, value=1 - betas[1])
            update = (m / (1 - betas[0] ** t)) / (
                (v / (1 - betas[1] ** t)).sqrt() + eps) + wd * value
            value.sub_(lr * update)
            master = opt.state[p]["master_param"]
            assert master.dtype == torch.float32
            error = ((master.double() - value).norm() / value.norm()).item()
            assert error < 1e-6, f"master weight rel. L2 {error:.2e} at step {t}"
            check_quantized_from(p, master)
    assert losses[-1] < losses[0], f"loss did not fall: {losses}"


@pytest.mark.parametrize("make", ["adam", "sgd"])
def test_without_master_weights(make):
    """One step updates each FP8 parameter through its dequantized value:
    the parameter is then that value's step quantized (Adam's first
    bias-corrected step moves by lr sign(g); SGD's by lr g). Small updates
    are lost to the requantization here, which is what master weights are
    for (the loss need not fall)."""
    module = fp8_mlp(preserve=False)
    lr = 1e-3 if make == "adam" else 0.05
    opt = (FusedAdam(module.parameters(), lr=lr, eps=1e-30)
           if make == "adam" else
           FusedSGD(module.parameters(), lr=lr, momentum=0.9))
    x = torch.randn(512, 256, device="cuda", dtype=BF16)
    target = torch.randn(512, 256, device="cuda")
    before = {p: p.dequantize(torch.float32) for p in fp8_params(module)}
    _, grads = train_step(module, opt, x, target)
    for p in fp8_params(module):
        assert isinstance(p, te.Float8Tensor)
        g = grads[p].float()
        step = g.sign() if make == "adam" else g
        check_quantized_from(p, before[p] - lr * step)
        assert math.isfinite(float(p._scale_inv))
