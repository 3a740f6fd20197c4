"""FusedAdam: Transformer Engine's Adam/AdamW (its arguments, defaults and
update rule), with optional fp32 master weights held by the optimizer."""
import torch

from . import _working

FLOAT32 = torch.float32
_MOMENT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
_MASTER_DTYPES = (torch.float32, torch.float16)


class FusedAdam(torch.optim.Optimizer):
    """TE's FusedAdam. Per parameter with a gradient, at group step t (one
    count per group, `group["step"]`, as TE keeps it):

        m = b1 m + (1 - b1) g,  v = b2 v + (1 - b2) g^2
        p = p - lr (m / c1 / (sqrt(v / c2) + eps) + wd p)   (adam_w_mode)

    c1 = 1 - b1^t, c2 = 1 - b2^t (1 without bias_correction); without
    adam_w_mode (Adam with L2) g + wd p replaces g and the update has no
    wd p term. Computed in float32 whatever the dtypes: on CUDA, AdamW
    with bias correction runs PyTorch's one-pass fused kernel
    (torch._fused_adamw_, on the float32 masters, parameters or copies);
    otherwise PyTorch's foreach ops.

    `master_weights=True` keeps a `master_weight_dtype` copy of every
    parameter in the optimizer state (`master_param`; float32 or float16),
    which the step updates and then writes into the parameter (rounded to
    bf16/fp16, or quantized into an FP8 te.Float8Tensor); a master weight
    starts from the value fp8_model_init(preserve_high_precision_init_val=
    True) kept, when there is one. `exp_avg_dtype` / `exp_avg_sq_dtype`:
    float32, bfloat16 or float16 moments. `use_decoupled_grad` reads
    `param.decoupled_grad` instead of `.grad` (Megatron-LM, FP8
    parameters). `set_grad_none` is zero_grad's default.

    Not supported (NotImplementedError naming the argument): `capturable`
    (a CUDA-graph-captured step), uint8 (FP8) moments,
    `store_param_remainders`, a step's `grad_scaler`; `amsgrad`
    (RuntimeError, as TE's)."""

    def __init__(self, params, lr=1e-3, bias_correction=True,
                 betas=(0.9, 0.999), eps=1e-8, adam_w_mode=True,
                 weight_decay=0.0, amsgrad=False, set_grad_none=True,
                 capturable=False, master_weights=False,
                 master_weight_dtype=torch.float32,
                 exp_avg_dtype=torch.float32,
                 exp_avg_sq_dtype=torch.float32, use_decoupled_grad=False,
                 store_param_remainders=False):
        owner = "FusedAdam"
        if amsgrad:
            raise RuntimeError("FusedAdam does not support the AMSGrad "
                               "variant.")
        for name, value in (("capturable", capturable),
                            ("store_param_remainders",
                             store_param_remainders)):
            if value:
                raise NotImplementedError(
                    f"{owner}: {name}=True is not supported by tejit")
        _working.check_dtype(owner, "exp_avg_dtype", exp_avg_dtype,
                             _MOMENT_DTYPES)
        _working.check_dtype(owner, "exp_avg_sq_dtype", exp_avg_sq_dtype,
                             _MOMENT_DTYPES)
        if master_weights:
            _working.check_dtype(owner, "master_weight_dtype",
                                 master_weight_dtype, _MASTER_DTYPES)
        defaults = dict(lr=lr, bias_correction=bias_correction, betas=betas,
                        eps=eps, weight_decay=weight_decay)
        super().__init__(params, defaults)
        self.adam_w_mode = bool(adam_w_mode)
        self.set_grad_none = bool(set_grad_none)
        self.master_weights = bool(master_weights)
        self.master_weight_dtype = master_weight_dtype
        self.exp_avg_dtype = exp_avg_dtype
        self.exp_avg_sq_dtype = exp_avg_sq_dtype
        self.use_decoupled_grad = bool(use_decoupled_grad)

    def zero_grad(self, set_to_none=None):
        """Clears the gradients (`.decoupled_grad` with
        use_decoupled_grad): set to None, or zeroed with
        set_to_none=False (default: the constructor's set_grad_none)."""
        set_to_none = self.set_grad_none if set_to_none is None \
            else set_to_none
        if not self.use_decoupled_grad:
            super().zero_grad(set_to_none=set_to_none)
            return
        for group in self.param_groups:
            for p in group["params"]:
                if getattr(p, "decoupled_grad", None) is None:
                    continue
                if set_to_none:
                    p.decoupled_grad = None
                else:
                    p.decoupled_grad.zero_()

    def _state_of(self, p):
        state = self.state[p]
        if not state:
            state["exp_avg"] = torch.zeros(p.shape, dtype=self.exp_avg_dtype,
                                           device=p.device)
            state["exp_avg_sq"] = torch.zeros(
                p.shape, dtype=self.exp_avg_sq_dtype, device=p.device)
            if self.master_weights:
                state["master_param"] = _working.master_of(
                    p, self.master_weight_dtype)
        return state

    def load_state_dict(self, state_dict):
        """torch.optim's, keeping each state tensor's dtype (PyTorch would
        round float32 moments and master weights to a bf16 parameter's)."""
        super().load_state_dict(state_dict)
        _working.restore_state_dtypes(self, state_dict)

    @torch.no_grad()
    def step(self, closure=None, grad_scaler=None):
        """One Adam step over every parameter with a gradient; returns
        closure()'s loss when given a closure."""
        if grad_scaler is not None:
            raise NotImplementedError("FusedAdam.step: grad_scaler is not "
                                      "supported by tejit")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"]
                      if _working.gradient_of(p, self.use_decoupled_grad)
                      is not None]
            if params:
                group["step"] = group.get("step", 0) + 1
                self._update(group, params)
        return loss

    def _update(self, group, params):
        b1, b2 = group["betas"]
        t = group["step"]
        c1 = 1 - b1 ** t if group["bias_correction"] else 1.0
        c2 = 1 - b2 ** t if group["bias_correction"] else 1.0
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        states = [self._state_of(p) for p in params]
        # What the step updates: the master weights, else the parameters.
        targets = [s["master_param"] for s in states] if self.master_weights \
            else params
        weights = [_working.float32_of(w) for w in targets]
        grads = [_working.float32_of(
            _working.gradient_of(p, self.use_decoupled_grad))
            for p in params]
        ms = [_working.float32_of(s["exp_avg"]) for s in states]
        vs = [_working.float32_of(s["exp_avg_sq"]) for s in states]
        if self._fused_kernel_applies(group, weights):
            # PyTorch's one-pass multi-tensor AdamW kernel: the same update
            # (the weight decay as p (1 - lr wd), the same value), reading
            # the gradients only.
            step = torch.full((1,), float(t), device=weights[0].device)
            torch._fused_adamw_(weights, grads, ms, vs, [],
                                [step] * len(weights), lr=lr, beta1=b1,
                                beta2=b2, weight_decay=wd, eps=eps,
                                amsgrad=False, maximize=False)
        else:
            self._foreach_update(weights, grads, ms, vs, lr, b1, b2, eps, wd,
                                 c1, c2)
        for s, m, v in zip(states, ms, vs):
            _working.store(s["exp_avg"], m)
            _working.store(s["exp_avg_sq"], v)
        for target, weight in zip(targets, weights):
            _working.store(target, weight)
        if self.master_weights:
            for p, weight in zip(params, weights):
                _working.store(p, weight)

    def _fused_kernel_applies(self, group, weights):
        """PyTorch's fused kernel: AdamW on float32 CUDA tensors of one
        device, always with bias correction (Adam with L2 takes the
        foreach ops)."""
        device = weights[0].device
        return (self.adam_w_mode and group["bias_correction"]
                and device.type == "cuda" and hasattr(torch, "_fused_adamw_")
                and all(w.device == device for w in weights))

    def _foreach_update(self, weights, grads, ms, vs, lr, b1, b2, eps, wd,
                        c1, c2):
        """The update in PyTorch's foreach ops (float32 lists)."""
        if not self.adam_w_mode and wd != 0:
            grads = torch._foreach_add(grads, weights, alpha=wd)  # L2
        torch._foreach_mul_(ms, b1)
        torch._foreach_add_(ms, grads, alpha=1 - b1)
        torch._foreach_mul_(vs, b2)
        torch._foreach_addcmul_(vs, grads, grads, value=1 - b2)
        denominators = torch._foreach_div(vs, c2)
        torch._foreach_sqrt_(denominators)
        torch._foreach_add_(denominators, eps)
        updates = torch._foreach_div(ms, c1)
        torch._foreach_div_(updates, denominators)
        if self.adam_w_mode and wd != 0:
            torch._foreach_add_(updates, weights, alpha=wd)
        torch._foreach_add_(weights, updates, alpha=-lr)
