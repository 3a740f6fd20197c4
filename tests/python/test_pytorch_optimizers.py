"""tejit.pytorch.optimizers (TE's FusedAdam and FusedSGD) on the CPU,
against independent float64 references written out step by step, on
fresh random data: AdamW and Adam-with-L2, bias correction on and off,
two parameter groups, bf16 parameters with and without fp32 master
weights (the master's value and the parameter as its rounding), bf16
moments, use_decoupled_grad, zero_grad's set_grad_none, the state_dict
round trip continuing bit for bit, and the refusals; FusedSGD with
momentum, dampening, nesterov and weight decay before or after the
momentum. Needs PyTorch (skipped without it). FP8 parameters
(fp8_model_init's Float8Tensors) need a GPU: tests/gpu/test_optimizers.py.
Run: python3 -m pytest tests/python
"""
import math
import random
import unittest
import zlib

from torch_free import HAVE_TORCH

if HAVE_TORCH:
    import torch

    from tejit.pytorch.optimizers import FusedAdam, FusedSGD

SEED = random.SystemRandom().randrange(1 << 31)


def adam_reference(values, grads, steps, lr, betas, eps, wd, adam_w,
                   bias_correction):
    """Float64 Adam, element by element over flat lists: `values` the
    start, `grads[t]` step t's gradients; returns the values after."""
    b1, b2 = betas
    p = list(values)
    m = [0.0] * len(p)
    v = [0.0] * len(p)
    for t in range(1, steps + 1):
        c1 = 1 - b1 ** t if bias_correction else 1.0
        c2 = 1 - b2 ** t if bias_correction else 1.0
        for i, g in enumerate(grads[t - 1]):
            if not adam_w:
                g = g + wd * p[i]
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            update = m[i] / c1 / (math.sqrt(v[i] / c2) + eps)
            if adam_w:
                update += wd * p[i]
            p[i] -= lr * update
    return p


def sgd_reference(values, grads, lr, momentum, dampening, wd, nesterov,
                  wd_after):
    p = list(values)
    buf = None
    for step_grads in grads:
        g = list(step_grads)
        if wd and not wd_after:
            g = [gi + wd * pi for gi, pi in zip(g, p)]
        if momentum:
            buf = list(g) if buf is None else [
                momentum * b + (1 - dampening) * gi for b, gi in zip(buf, g)]
            g = ([gi + momentum * b for gi, b in zip(g, buf)] if nesterov
                 else list(buf))
        if wd and wd_after:
            g = [gi + wd * pi for gi, pi in zip(g, p)]
        p = [pi - lr * gi for pi, gi in zip(p, g)]
    return p


def rel_err(got, want):
    got = torch.tensor(got, dtype=torch.float64)
    want = torch.tensor(want, dtype=torch.float64)
    return ((got - want).norm() / want.norm()).item()


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class FusedAdamTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(SEED + zlib.crc32(self.id().encode()))

    def run_adam(self, dtype=None, steps=4, **options):
        """Two parameter groups (the second with its own lr), parameters
        of `dtype` (float32); returns (parameters after, float64
        references, optimizer)."""
        dtype = dtype or torch.float32
        shapes = [(37, 5), (64,)]
        params = [torch.nn.Parameter(torch.randn(s).to(dtype))
                  for s in shapes]
        starts = [p.detach().double().flatten().tolist() for p in params]
        lrs = [1e-2, 3e-3]
        opt = FusedAdam([{"params": [params[0]]},
                         {"params": [params[1]], "lr": lrs[1]}],
                        lr=lrs[0], **{k: v for k, v in options.items()
                                      if k not in ("lr",)})
        grads = [[] for _ in params]
        for _ in range(steps):
            for p, history in zip(params, grads):
                g = torch.randn(p.shape).to(dtype)
                p.grad = g
                history.append(g.double().flatten().tolist())
            opt.step()
        betas = options.get("betas", (0.9, 0.999))
        wants = [adam_reference(
            start, history, steps, lr, betas, options.get("eps", 1e-8),
            options.get("weight_decay", 0.0),
            options.get("adam_w_mode", True),
            options.get("bias_correction", True))
            for start, history, lr in zip(starts, grads, lrs)]
        return params, wants, opt

    def test_adamw_and_l2_float32(self):
        for adam_w in (True, False):
            for correction in (True, False):
                params, wants, _ = self.run_adam(
                    adam_w_mode=adam_w, bias_correction=correction,
                    weight_decay=0.1, betas=(0.8, 0.95), eps=1e-6)
                for p, want in zip(params, wants):
                    error = rel_err(p.detach().double().flatten().tolist(),
                                    want)
                    self.assertLess(error, 1e-6, (adam_w, correction))

    def test_bf16_parameters_with_master_weights(self):
        params, wants, opt = self.run_adam(
            dtype=torch.bfloat16, master_weights=True, weight_decay=0.01)
        for p, want in zip(params, wants):
            master = opt.state[p]["master_param"]
            self.assertEqual(master.dtype, torch.float32)
            # The master follows float64 to float32 rounding (its
            # gradients are the bf16 ones the reference took too).
            self.assertLess(rel_err(master.double().flatten().tolist(),
                                    want), 1e-6)
            self.assertTrue(torch.equal(p.detach(),
                                        master.to(torch.bfloat16)))

    def test_bf16_parameters_without_master_drift(self):
        """Without master weights each step rounds the parameter to bf16:
        further from the reference than with them, but close."""
        params, wants, _ = self.run_adam(dtype=torch.bfloat16, steps=3)
        for p, want in zip(params, wants):
            self.assertLess(rel_err(p.detach().double().flatten().tolist(),
                                    want), 1e-2)

    def test_bf16_moments(self):
        params, wants, opt = self.run_adam(exp_avg_dtype=torch.bfloat16,
                                           exp_avg_sq_dtype=torch.bfloat16)
        for p, want in zip(params, wants):
            self.assertEqual(opt.state[p]["exp_avg"].dtype, torch.bfloat16)
            self.assertLess(rel_err(p.detach().double().flatten().tolist(),
                                    want), 1e-3)

    def test_decoupled_grad_and_zero_grad(self):
        p = torch.nn.Parameter(torch.randn(16))
        before = p.detach().clone()
        opt = FusedAdam([p], lr=0.1, use_decoupled_grad=True)
        p.grad = torch.randn(16)  # ignored: the step reads decoupled_grad
        opt.step()
        self.assertTrue(torch.equal(p.detach(), before))
        p.decoupled_grad = torch.ones(16)
        opt.step()
        # First step, bias-corrected: each element moves by lr.
        self.assertTrue(torch.allclose(p.detach(), before - 0.1, atol=1e-6))
        opt.zero_grad()
        self.assertIsNone(p.decoupled_grad)

    def test_state_dict_round_trip_continues_bit_for_bit(self):
        p = torch.nn.Parameter(torch.randn(32).to(torch.bfloat16))
        q = torch.nn.Parameter(p.detach().clone())
        a = FusedAdam([p], lr=1e-2, master_weights=True)
        grads = [torch.randn(32).to(torch.bfloat16) for _ in range(4)]
        for g in grads[:2]:
            p.grad = g
            a.step()
        b = FusedAdam([q], lr=1e-2, master_weights=True)
        q.data.copy_(p.detach())
        b.load_state_dict(a.state_dict())
        for g in grads[2:]:
            p.grad, q.grad = g, g.clone()
            a.step()
            b.step()
        self.assertTrue(torch.equal(p.detach(), q.detach()))
        self.assertEqual(a.param_groups[0]["step"], 4)

    def test_refusals(self):
        p = [torch.nn.Parameter(torch.randn(4))]
        with self.assertRaisesRegex(RuntimeError, "AMSGrad"):
            FusedAdam(p, amsgrad=True)
        for arguments, word in (({"capturable": True}, "capturable"),
                                ({"store_param_remainders": True},
                                 "store_param_remainders"),
                                ({"exp_avg_dtype": torch.uint8},
                                 "exp_avg_dtype"),
                                ({"master_weights": True,
                                  "master_weight_dtype": torch.bfloat16},
                                 "master_weight_dtype")):
            with self.assertRaisesRegex(NotImplementedError, word):
                FusedAdam(p, **arguments)
        opt = FusedAdam(p)
        with self.assertRaisesRegex(NotImplementedError, "grad_scaler"):
            opt.step(grad_scaler=object())


@unittest.skipUnless(HAVE_TORCH, "needs PyTorch")
class FusedSgdTest(unittest.TestCase):
    def test_against_reference(self):
        torch.manual_seed(SEED)
        cases = [dict(momentum=0.0), dict(momentum=0.9),
                 dict(momentum=0.9, dampening=0.1, weight_decay=0.05),
                 dict(momentum=0.9, nesterov=True, weight_decay=0.05),
                 dict(momentum=0.9, weight_decay=0.05,
                      wd_after_momentum=True)]
        for options in cases:
            for dtype, bound in ((torch.float32, 1e-6),
                                 (torch.bfloat16, 1e-2)):
                p = torch.nn.Parameter(torch.randn(50).to(dtype))
                start = p.detach().double().tolist()
                opt = FusedSGD([p], lr=0.05, **options)
                history = []
                for _ in range(3):
                    p.grad = torch.randn(50).to(dtype)
                    history.append(p.grad.double().tolist())
                    opt.step()
                want = sgd_reference(
                    start, history, 0.05, options.get("momentum", 0.0),
                    options.get("dampening", 0.0),
                    options.get("weight_decay", 0.0),
                    options.get("nesterov", False),
                    options.get("wd_after_momentum", False))
                self.assertLess(rel_err(p.detach().double().tolist(), want),
                                bound, (options, dtype))

    def test_refusals(self):
        p = [torch.nn.Parameter(torch.randn(4))]
        with self.assertRaisesRegex(ValueError, "nesterov"):
            FusedSGD(p, nesterov=True)
        with self.assertRaisesRegex(ValueError, "learning rate"):
            FusedSGD(p, lr=-1.0)


if __name__ == "__main__":
    unittest.main()
