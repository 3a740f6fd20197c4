"""GPU tests of tejit.pytorch.parallel_cross_entropy (TE's vocab-parallel
cross entropy; docs/cross-entropy.md) on one GPU:

    PYTHONPATH=python python3 -m pytest -q tests/gpu/test_cross_entropy.py

Fresh random logits (normal, scale 2, so that softmaxes are neither flat
nor one-hot) and targets, rows ignored at random; each case against a
float64 reference computed from the same logits (as stored: bf16 rounding
is the input's, not an error) chunk by chunk:
  lse = logsumexp(x), loss = lse - (1 - ε) x_y - (ε / V) sum_j x_j (0 for
  ignored rows), with reduce_loss the mean over rows not ignored;
  grad = (softmax(x) - ε / V - (1 - ε) onehot(y)) g, g the loss's gradient
  (per row, or the mean's divided by the count), 0 for ignored rows;
and the loss also against torch.nn.functional.cross_entropy (float32
logits, label_smoothing, ignore_index, reduction "none" / "mean").
Cases: bf16, fp16 and fp32 logits; vocab 32000, 50257 (odd: 1-element
vectors), 128256 and 151936; 8192 tokens as [B, SQ] and [SQ, B]; label
smoothing 0 and 0.1; reduce_loss; int32 targets; an incoming gradient that
is not all ones (loss * weights). Also: the gradient is written over the
logits (the backward allocates far less than the logits' bytes), a second
backward is refused, every row ignored gives a mean of 0 and no NaN, and
forward + backward captured in a CUDA graph (is_cg_capturable) replay to
the same numbers. TEJIT_TEST_SEED=N repeats a run.
"""
import pytest

from gpu_test_support import run_seed, seed_per_test, torch

import cross_entropy_reference  # noqa: E402 - beside this file

import tejit.pytorch as te  # noqa: E402
from tejit.pytorch.cross_entropy import parallel_cross_entropy  # noqa: E402

F = torch.nn.functional
SEED = run_seed("test_cross_entropy")
fresh_seed = seed_per_test(SEED)

# Tolerances on the loss (f32 arithmetic, fast exponentials) and on the
# gradient (rounded to the logits' dtype), relative to the largest value.
LOSS_RTOL = 2e-5
GRAD_RTOL = {torch.float32: 1e-5, torch.bfloat16: 8e-3,
             torch.float16: 1e-3}
IGNORE = -100


def make_inputs(shape, vocab, dtype, ignore_fraction=0.1,
                target_dtype=torch.int64):
    logits = 2.0 * torch.randn(*shape, vocab, device="cuda")
    logits = logits.to(dtype)
    target = torch.randint(0, vocab, shape, device="cuda",
                           dtype=target_dtype)
    ignored = torch.rand(shape, device="cuda") < ignore_fraction
    target[ignored] = IGNORE
    return logits, target


def reference(logits, target, smoothing, grad_rows):
    return cross_entropy_reference.reference(logits, target, smoothing,
                                             grad_rows, IGNORE)


def assert_close(got, want, rtol, what):
    scale = want.abs().max().item()
    error = (got.double() - want).abs().max().item()
    assert error <= rtol * max(scale, 1e-30), (
        f"{what}: max |error| {error:.3e} > {rtol:.1e} x max |want| "
        f"{scale:.3e}")


def run_case(shape, vocab, dtype, smoothing, reduce_loss,
             target_dtype=torch.int64, weighted=False):
    logits, target = make_inputs(shape, vocab, dtype,
                                 target_dtype=target_dtype)
    rows = logits.numel() // vocab
    flat_logits = logits.reshape(rows, vocab).clone()
    flat_target = target.reshape(rows)
    keep = (flat_target != IGNORE).double()
    count = max(keep.sum().item(), 1.0)
    weights = (torch.rand(shape, device="cuda") + 0.5 if weighted
               else torch.ones(shape, device="cuda"))

    inp = logits.clone().requires_grad_()
    loss = parallel_cross_entropy(inp, target, smoothing, reduce_loss, None,
                                  IGNORE)
    assert loss.dtype == torch.float32
    if reduce_loss:
        assert loss.shape == ()
        grad_rows = torch.full((rows,), 1.0 / count, device="cuda")
        loss.backward()
    else:
        assert loss.shape == tuple(shape)
        grad_rows = weights.reshape(rows)
        (loss * weights).sum().backward()
    assert inp.grad.dtype == dtype and inp.grad.shape == logits.shape

    want_loss, want_grad = reference(flat_logits, flat_target, smoothing,
                                     grad_rows)
    if reduce_loss:
        assert_close(loss.reshape(1), (want_loss.sum() / count).reshape(1),
                     LOSS_RTOL, "mean loss")
        torch_loss = F.cross_entropy(flat_logits.float(), flat_target.long(),
                                     ignore_index=IGNORE,
                                     label_smoothing=smoothing)
        assert_close(loss.reshape(1), torch_loss.double().reshape(1), 1e-4,
                     "mean loss against F.cross_entropy")
    else:
        got = loss.reshape(rows)
        assert_close(got, want_loss, LOSS_RTOL, "loss")
        assert torch.all(got[flat_target == IGNORE] == 0)
        torch_loss = F.cross_entropy(flat_logits.float(), flat_target.long(),
                                     ignore_index=IGNORE,
                                     label_smoothing=smoothing,
                                     reduction="none")
        assert_close(got, torch_loss.double(), 1e-4,
                     "loss against F.cross_entropy")
    got_grad = inp.grad.reshape(rows, vocab)
    assert_close(got_grad, want_grad, GRAD_RTOL[dtype], "gradient")
    assert torch.all(got_grad[flat_target == IGNORE] == 0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32],
                         ids=["bf16", "fp32"])
@pytest.mark.parametrize("vocab", [32000, 50257, 128256])
@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("reduce_loss", [False, True],
                         ids=["per_row", "mean"])
def test_against_float64(dtype, vocab, smoothing, reduce_loss):
    if dtype == torch.float32 and vocab == 128256 and reduce_loss:
        pytest.skip("one fp32 128k case (per row) is enough")
    run_case((4, 2048), vocab, dtype, smoothing, reduce_loss)


def test_sbhd_fp16_int32_targets_weighted():
    run_case((2048, 4), 32000, torch.float16, 0.1, False,
             target_dtype=torch.int32, weighted=True)


def test_qwen_vocab_bf16():
    run_case((2, 4096), 151936, torch.bfloat16, 0.0, True)


def test_small_rows():
    # Fewer columns than a block's threads have vectors; odd widths.
    for vocab in (7, 100, 1000):
        run_case((3, 5), vocab, torch.float32, 0.1, False, weighted=True)
        run_case((3, 5), vocab, torch.bfloat16, 0.0, True)


def test_gradient_overwrites_the_logits():
    vocab, shape = 128256, (2, 4096)
    logits, target = make_inputs(shape, vocab, torch.bfloat16)
    leaf = logits.clone().requires_grad_()
    scaled = leaf * 1.0  # a non-leaf: the gradient autograd returns is ours
    loss = parallel_cross_entropy(scaled, target, reduce_loss=True)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    (grad,) = torch.autograd.grad(loss, scaled)
    torch.cuda.synchronize()
    extra = torch.cuda.max_memory_allocated() - before
    logits_bytes = scaled.numel() * scaled.element_size()
    assert extra < 0.05 * logits_bytes, (
        f"the backward allocated {extra} bytes, logits are {logits_bytes}")
    rows = grad.numel() // vocab
    flat_target = target.reshape(rows)
    count = max((flat_target != IGNORE).sum().item(), 1)
    _, want = reference(logits.reshape(rows, vocab), flat_target, 0.0,
                        torch.full((rows,), 1.0 / count, device="cuda"))
    assert_close(grad.reshape(rows, vocab), want, GRAD_RTOL[torch.bfloat16],
                 "gradient")


def test_second_backward_is_refused():
    logits, target = make_inputs((2, 64), 1000, torch.float32)
    inp = logits.clone().requires_grad_()
    loss = parallel_cross_entropy(inp, target, reduce_loss=True)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="twice"):
        loss.backward()


def test_every_row_ignored():
    logits, target = make_inputs((2, 64), 1000, torch.bfloat16)
    target.fill_(IGNORE)
    inp = logits.clone().requires_grad_()
    loss = parallel_cross_entropy(inp, target, reduce_loss=True)
    loss.backward()
    assert loss.item() == 0.0
    assert torch.all(inp.grad == 0)


def test_input_kept_until_the_backward():
    logits, target = make_inputs((2, 64), 1000, torch.bfloat16)
    inp = logits.clone().requires_grad_()
    parallel_cross_entropy(inp, target)
    assert torch.equal(inp.detach(), logits)


def test_cuda_graph_replays():
    vocab, shape = 32000, (2, 1024)
    logits, target = make_inputs(shape, vocab, torch.bfloat16)
    static = logits.clone().requires_grad_()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # compiles both programs
        for _ in range(2):
            with torch.no_grad():
                static.copy_(logits)
            loss = parallel_cross_entropy(static, target, 0.1, True,
                                          is_cg_capturable=True)
            torch.autograd.grad(loss, static)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = parallel_cross_entropy(static, target, 0.1, True,
                                      is_cg_capturable=True)
        (grad,) = torch.autograd.grad(loss, static)
    for _ in range(2):
        fresh, _ = make_inputs(shape, vocab, torch.bfloat16)
        with torch.no_grad():
            static.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        rows = fresh.numel() // vocab
        flat_target = target.reshape(rows)
        count = max((flat_target != IGNORE).sum().item(), 1)
        want_loss, want_grad = reference(
            fresh.reshape(rows, vocab), flat_target, 0.1,
            torch.full((rows,), 1.0 / count, device="cuda"))
        assert_close(loss.reshape(1), (want_loss.sum() / count).reshape(1),
                     LOSS_RTOL, "replayed mean loss")
        assert_close(grad.reshape(rows, vocab), want_grad,
                     GRAD_RTOL[torch.bfloat16], "replayed gradient")


def test_exported_as_te_does():
    assert te.parallel_cross_entropy is parallel_cross_entropy
