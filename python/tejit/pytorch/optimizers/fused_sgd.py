"""FusedSGD: Transformer Engine's SGD with momentum (its arguments and
update rule)."""
import torch

from . import _working


class FusedSGD(torch.optim.Optimizer):
    """TE's FusedSGD, torch.optim.SGD's rule computed in float32: per
    parameter with a gradient g,

        g = g + wd p                        (weight decay; after the
                                             momentum with wd_after_momentum)
        b = momentum b + (1 - dampening) g  (b = g at the first step)
        g = g + momentum b (nesterov), else g = b   (momentum != 0)
        p = p - lr g

    bf16/fp16 parameters and FP8 ones (te.Float8Tensor) are updated through
    a float32 copy (FP8: quantized back by tejit's cast kernel).
    `materialize_master_grads` is accepted for TE's signature (there are
    no master gradients here); `set_grad_none` is zero_grad's default."""

    def __init__(self, params, lr=0.001, momentum=0.0, dampening=0.0,
                 weight_decay=0.0, nesterov=False, wd_after_momentum=False,
                 materialize_master_grads=True, set_grad_none=False):
        if lr < 0.0:
            raise ValueError(f"FusedSGD: invalid learning rate {lr}")
        if momentum < 0.0:
            raise ValueError(f"FusedSGD: invalid momentum {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"FusedSGD: invalid weight_decay {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("FusedSGD: nesterov momentum needs a momentum "
                             "and zero dampening")
        defaults = dict(lr=lr, momentum=momentum, dampening=dampening,
                        weight_decay=weight_decay, nesterov=nesterov)
        super().__init__(params, defaults)
        self.wd_after_momentum = bool(wd_after_momentum)
        self.materialize_master_grads = bool(materialize_master_grads)
        self.set_grad_none = bool(set_grad_none)

    def zero_grad(self, set_to_none=None):
        super().zero_grad(set_to_none=self.set_grad_none
                          if set_to_none is None else set_to_none)

    def load_state_dict(self, state_dict):
        """torch.optim's, keeping each state tensor's dtype (PyTorch would
        round float32 moments and master weights to a bf16 parameter's)."""
        super().load_state_dict(state_dict)
        _working.restore_state_dtypes(self, state_dict)

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if params:
                self._update(group, params)
        return loss

    def _update(self, group, params):
        lr, wd = group["lr"], group["weight_decay"]
        momentum, dampening = group["momentum"], group["dampening"]
        weights = [_working.float32_of(p) for p in params]
        grads = [_working.float32_of(p.grad) for p in params]
        if wd != 0 and not self.wd_after_momentum:
            grads = torch._foreach_add(grads, weights, alpha=wd)
        if momentum != 0:
            buffers = []
            for p, g in zip(params, grads):
                state = self.state[p]
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = g.clone()
                else:
                    state["momentum_buffer"].mul_(momentum).add_(
                        g, alpha=1 - dampening)
                buffers.append(state["momentum_buffer"])
            if group["nesterov"]:
                grads = torch._foreach_add(grads, buffers, alpha=momentum)
            else:
                grads = buffers
        if wd != 0 and self.wd_after_momentum:
            grads = torch._foreach_add(grads, weights, alpha=wd)
        torch._foreach_add_(weights, grads, alpha=-lr)
        for p, weight in zip(params, weights):
            _working.store(p, weight)
