"""The float64 reference of parallel_cross_entropy (docs/cross-entropy.md)
that tests/gpu/test_cross_entropy.py and cross_entropy_parallel_check.py
compare against: over the whole vocab, chunk by chunk of rows."""
import torch


def reference(logits, target, smoothing, grad_rows, ignore, chunk=512):
    """float64 (loss [rows], grad [rows, V]) of 2-D logits and 1-D targets:
    lse = logsumexp(x), loss = lse - (1 - ε) x_y - (ε / V) sum_j x_j, grad
    = (softmax(x) - ε / V - (1 - ε) onehot(y)) g with g = grad_rows (the
    loss's gradient per row); 0 for rows whose target is `ignore`."""
    rows, vocab = logits.shape
    loss = torch.zeros(rows, dtype=torch.float64, device=logits.device)
    grad = torch.empty(rows, vocab, dtype=torch.float64,
                       device=logits.device)
    for begin in range(0, rows, chunk):
        x = logits[begin:begin + chunk].double()
        y = target[begin:begin + chunk].long()
        keep = y != ignore
        safe_y = torch.where(keep, y, torch.zeros_like(y))
        lse = torch.logsumexp(x, dim=1)
        x_y = x.gather(1, safe_y[:, None])[:, 0]
        part = lse - (1 - smoothing) * x_y - smoothing / vocab * x.sum(1)
        loss[begin:begin + chunk] = torch.where(keep, part,
                                                torch.zeros_like(part))
        g = torch.softmax(x, dim=1) - smoothing / vocab
        g.scatter_add_(1, safe_y[:, None],
                       torch.full_like(x_y, -(1 - smoothing))[:, None])
        grad[begin:begin + chunk] = g * (grad_rows[begin:begin + chunk]
                                         .double() * keep)[:, None]
    return loss, grad
