"""GPU tests of tejit.pytorch.distributed.CudaRNGStatesTracker (TE's and
Megatron-LM's named CUDA RNG streams):

    PYTHONPATH=python python3 -m pytest tests/gpu/test_rng_tracker.py

Against torch's own generator as the reference: a stream added with seed
s draws, across successive fork()s, exactly what a generator seeded with s
draws in the same calls; the default stream draws as if no fork had happened;
get_states / set_states replays a stream; names and seeds are added once
and an unknown name is refused. Then in use: DotProductAttention's
dropout seed is drawn inside the tracker's fork (two trackers with one
seed give bit-equal outputs, another seed different ones), and
te.checkpoint with the tracker recomputes the caller's own tracked draws
bit-equal to a plain step.
"""
import zlib

import pytest

from gpu_test_support import run_seed, torch

import tejit.pytorch as te  # noqa: E402

SEED = run_seed("test_rng_tracker")
BF16 = torch.bfloat16
Tracker = te.distributed.CudaRNGStatesTracker


@pytest.fixture
def fresh_seed(request):
    """The run's seed plus a hash of the test's name (each test its own
    streams), below 2**40 so that offsets stay valid seeds."""
    return (SEED + zlib.crc32(request.node.name.encode())) % (1 << 40)


def draws(count):
    return torch.rand(count, device="cuda")


def test_fork_continues_one_stream_and_spares_the_default(fresh_seed):
    tracker = Tracker()
    assert not tracker.is_initialized()
    tracker.add("model-parallel-rng", fresh_seed + 1)
    tracker.add("expert-parallel-rng", fresh_seed + 2)
    assert tracker.is_initialized()
    torch.manual_seed(fresh_seed)
    default_first = draws(1000)
    with tracker.fork():
        forked_first = draws(1000)
    default_second = draws(1000)
    with tracker.fork("model-parallel-rng"):
        forked_second = draws(1000)
    with tracker.fork("expert-parallel-rng"):
        other = draws(1000)

    # The references: the same calls on a generator seeded once (two
    # calls, as the draws' layout depends on each call's size).
    torch.manual_seed(fresh_seed)
    assert torch.equal(default_first, draws(1000))
    assert torch.equal(default_second, draws(1000))
    torch.cuda.manual_seed(fresh_seed + 1)
    assert torch.equal(forked_first, draws(1000))
    assert torch.equal(forked_second, draws(1000))
    assert not torch.equal(forked_first, forked_second)
    torch.cuda.manual_seed(fresh_seed + 2)
    assert torch.equal(other, draws(1000))


def test_states_round_trip_replays(fresh_seed):
    tracker = Tracker()
    tracker.add("model-parallel-rng", fresh_seed)
    with tracker.fork():
        draws(10)
    saved = tracker.get_states()
    with tracker.fork():
        first = draws(500)
    tracker.set_states(saved)
    with tracker.fork():
        again = draws(500)
    assert torch.equal(first, again)
    tracker.reset()
    assert not tracker.is_initialized()
    tracker.add("model-parallel-rng", fresh_seed)  # the seed is free again


def test_refusals(fresh_seed):
    tracker = Tracker()
    tracker.add("a", fresh_seed)
    with pytest.raises(ValueError, match="seed"):
        tracker.add("b", fresh_seed)
    with pytest.raises(ValueError, match="'a'"):
        tracker.add("a", fresh_seed + 1)
    with pytest.raises(KeyError, match="model-parallel-rng"):
        with tracker.fork():
            pass
    # A failed fork leaves the default stream where it was.
    torch.manual_seed(fresh_seed)
    want = draws(100)
    torch.manual_seed(fresh_seed)
    with pytest.raises(RuntimeError, match="inside"):
        with tracker.fork("a"):
            raise RuntimeError("inside")
    assert torch.equal(draws(100), want)


def test_attention_dropout_follows_the_tracker(fresh_seed):
    """DotProductAttention (no parameters) draws its dropout seed inside
    the tracker's fork: the same tracker seed gives bit-equal outputs,
    another seed other ones, whatever the default stream holds."""
    q, k, v = (torch.randn(128, 2, 8, 64, device="cuda", dtype=BF16)
               for _ in range(3))
    outputs = []
    for tracker_seed in (fresh_seed + 1, fresh_seed + 1, fresh_seed + 2):
        tracker = Tracker()
        tracker.add("model-parallel-rng", tracker_seed)
        attention = te.DotProductAttention(
            8, 64, attention_dropout=0.5,
            get_rng_state_tracker=lambda tracker=tracker: tracker)
        torch.manual_seed(fresh_seed + 3)  # the default stream: the same
        outputs.append(attention(q, k, v).detach())
    assert torch.equal(outputs[0], outputs[1])
    assert not torch.equal(outputs[0], outputs[2])


def test_checkpoint_recomputes_tracked_draws(fresh_seed):
    grads = []
    for checkpointed in (False, True):
        torch.manual_seed(fresh_seed)
        module = te.Linear(64, 64, params_dtype=BF16)
        tracker = Tracker()
        tracker.add("model-parallel-rng", fresh_seed + 1)

        def function(x):
            with tracker.fork():
                keep = torch.rand_like(x, dtype=torch.float32) > 0.5
            return module(x * keep)

        x = torch.randn(16, 64, device="cuda", dtype=BF16,
                        requires_grad=True)
        y = (te.checkpoint(function, x, get_rng_state_tracker=lambda: tracker)
             if checkpointed else function(x))
        y.float().square().sum().backward()
        grads.append((x.grad.clone(), module.weight.grad.clone()))
    assert torch.equal(grads[0][0], grads[1][0])
    assert torch.equal(grads[0][1], grads[1][1])
