"""GPU tests of tejit.pytorch.make_graphed_callables (TE's CUDA-graph
capture of a module's forward and backward).

    PYTHONPATH=python python3 -m pytest tests/gpu/test_graphed_callables.py

A graphed module and an eager twin (a deepcopy taken before either ran)
take the same fresh random inputs and output gradients for several steps:
the outputs, the input gradient and every parameter gradient must be equal
bit for bit (the same kernels run in the same order; only the launches
differ), and so must the FP8 state after the steps, which shows that the
delayed scaling moves on at every replay and that the warm-up left it
untouched. With dropout, replays must draw fresh masks. Keyword arguments
(a rotary table) become graph inputs; GroupedLinear's m_splits is a fixed
one. With fp8_weight_caching, graphs
replayed with is_first_microbatch True/False equal eager micro-batches,
and one graph set serves both (the memory check). Sizes: hidden 256 and the
quickstart's LayerNormMLP (hidden 4096, FFN 16384, 8192 tokens).
"""
import copy
import time

import pytest

from gpu_test_support import hybrid, perturb, run_seed, torch

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

SEED = run_seed("test_graphed_callables")
BF16 = torch.bfloat16
STEPS = 4


def step(module, x, dy, fp8_recipe, **kwargs):
    """One training step: (output, input gradient, {name: gradient})."""
    module.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_()
    with te.fp8_autocast(enabled=fp8_recipe is not None,
                         fp8_recipe=fp8_recipe):
        out = module(x, **kwargs)
    out.backward(dy)
    return (out.detach().clone(), x.grad.clone(),
            {n: p.grad.clone() for n, p in module.named_parameters()})


def meta_state(module):
    return {k: v for k, v in module.state_dict().items() if "fp8_meta" in k}


def graph_pair(make, sample_shape, fp8_recipe, **graph_kwargs):
    """(eager module, graphed module, sample input)."""
    torch.manual_seed(SEED)
    eager = make()
    perturb(eager)
    graphed = copy.deepcopy(eager)
    sample = torch.randn(*sample_shape, device="cuda", dtype=BF16,
                         requires_grad=True)
    graphed = te.make_graphed_callables(
        graphed, (sample,), fp8_enabled=fp8_recipe is not None,
        fp8_recipe=fp8_recipe, **graph_kwargs)
    return eager, graphed, sample


def assert_same_steps(make, shape, fp8_recipe, what, steps=STEPS):
    eager, graphed, _ = graph_pair(make, shape, fp8_recipe)
    if fp8_recipe is not None:
        # The warm-up's steps were undone: TE's initial state.
        for name, value in meta_state(graphed).items():
            want = 0.0 if name.endswith("amax_history") else 1.0
            assert torch.all(value == want), \
                f"{what}: {name} after make_graphed_callables: {value}"
    for index in range(steps):
        x = torch.randn(*shape, device="cuda", dtype=BF16)
        dy = torch.randn(*shape, device="cuda", dtype=BF16)
        want = step(eager, x, dy, fp8_recipe)
        got = step(graphed, x, dy, fp8_recipe)
        assert torch.equal(got[0], want[0]), f"{what}: output, step {index}"
        assert torch.equal(got[1], want[1]), \
            f"{what}: input gradient, step {index}"
        for name, grad in want[2].items():
            assert torch.equal(got[2][name], grad), \
                f"{what}: gradient of {name}, step {index}"
    want_meta, got_meta = meta_state(eager), meta_state(graphed)
    assert want_meta.keys() == got_meta.keys()
    for name, value in want_meta.items():
        assert torch.equal(got_meta[name], value), \
            f"{what}: FP8 state {name} after {steps} steps"
    if fp8_recipe is not None:
        history = want_meta["fp8_meta.bwd.amax_history"]
        assert torch.count_nonzero(history) > 0, f"{what}: no amax recorded"
    return eager, graphed


@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_layernorm_mlp_graph_matches_eager(fp8):
    assert_same_steps(lambda: te.LayerNormMLP(256, 1024, params_dtype=BF16),
                      (64, 256), hybrid() if fp8 else None,
                      f"LayerNormMLP {'fp8' if fp8 else 'bf16'}")


def test_transformer_layer_graph_matches_eager():
    assert_same_steps(lambda: te.TransformerLayer(
        256, 1024, 4, hidden_dropout=0.0, attention_dropout=0.0,
        params_dtype=BF16), (64, 2, 256), hybrid(), "TransformerLayer fp8")


def test_replays_draw_fresh_dropout_masks():
    _, graphed, _ = graph_pair(lambda: te.TransformerLayer(
        256, 1024, 4, params_dtype=BF16), (64, 2, 256), hybrid())
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16)
    dy = torch.randn_like(x)
    first = step(graphed, x, dy, hybrid())
    second = step(graphed, x, dy, hybrid())
    for out in (first, second):
        assert torch.isfinite(out[0]).all() and torch.isfinite(out[1]).all()
    assert not torch.equal(first[0], second[0]), "replays repeat the masks"


def test_unsupported_arguments_are_refused():
    module = te.Linear(64, 64, params_dtype=BF16)
    sample = torch.randn(16, 64, device="cuda", dtype=BF16,
                         requires_grad=True)
    with pytest.raises(NotImplementedError):
        te.make_graphed_callables(module, (sample,), fp8_enabled=True,
                                  fp8_calibrating=True)
    # Keyword arguments and FP8 weight caching are taken for modules, not
    # for plain functions.
    with pytest.raises(NotImplementedError):
        te.make_graphed_callables(lambda x, scale=None: module(x), (sample,),
                                  sample_kwargs={"scale": sample})
    with pytest.raises(NotImplementedError, match="modules only"):
        te.make_graphed_callables(lambda x: module(x), (sample,),
                                  fp8_enabled=True, fp8_weight_caching=True)


def microbatch(module, x, dy, fp8_recipe, first):
    """One micro-batch: forward with is_first_microbatch=`first`, backward
    of dy, gradients accumulating; (output, input gradient)."""
    x = x.detach().requires_grad_()
    with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
        out = module(x, is_first_microbatch=first)
    out.backward(dy)
    return out.detach().clone(), x.grad.clone()


class _Block(torch.nn.Module):
    """A container of two tejit modules, passing is_first_microbatch down.
    The capture calls it without the argument: the modules inside must
    follow the graph set being captured."""

    def __init__(self):
        super().__init__()
        self.first = te.LayerNormLinear(256, 512, params_dtype=BF16)
        self.second = te.Linear(512, 256, params_dtype=BF16)

    def forward(self, x, is_first_microbatch=None):
        hidden = self.first(x, is_first_microbatch=is_first_microbatch)
        return self.second(torch.nn.functional.gelu(hidden),
                           is_first_microbatch=is_first_microbatch)


@pytest.mark.parametrize("kind", ["LayerNormMLP", "TransformerLayer",
                                  "container"])
def test_fp8_weight_caching_graphs_match_eager(kind):
    """make_graphed_callables(fp8_weight_caching=True): micro-batches with
    is_first_microbatch True, False, False (and None, which casts) replay
    graphs that equal an eager twin given the same flags, bit for bit:
    outputs, input gradients, accumulated parameter gradients and the FP8
    state. After a weight update, a False micro-batch (breaking the
    promise on purpose) must still equal the eager twin, which reuses the
    casts made before the update: the False graphs really skip the casts."""
    torch.manual_seed(SEED)
    shape = (64, 256) if kind == "LayerNormMLP" else (64, 2, 256)
    if kind == "LayerNormMLP":
        eager = te.LayerNormMLP(256, 1024, params_dtype=BF16)
    elif kind == "TransformerLayer":
        eager = te.TransformerLayer(256, 1024, 4, hidden_dropout=0.0,
                                    attention_dropout=0.0,
                                    params_dtype=BF16)
    else:
        eager = _Block().cuda()
    perturb(eager)
    graphed = copy.deepcopy(eager)
    fp8_recipe = hybrid()
    sample = torch.randn(*shape, device="cuda", dtype=BF16,
                         requires_grad=True)
    graphed = te.make_graphed_callables(graphed, (sample,), fp8_enabled=True,
                                        fp8_recipe=fp8_recipe,
                                        fp8_weight_caching=True)
    params = dict(eager.named_parameters())

    def compare(flags, what):
        for index, first in enumerate(flags):
            x = torch.randn(*shape, device="cuda", dtype=BF16)
            dy = torch.randn_like(x)
            want = microbatch(eager, x, dy, fp8_recipe, first)
            got = microbatch(graphed, x, dy, fp8_recipe, first)
            assert torch.equal(got[0], want[0]), \
                f"{kind} {what}: output, micro-batch {index} ({first})"
            assert torch.equal(got[1], want[1]), \
                f"{kind} {what}: input gradient, micro-batch {index}"
        for name, param in graphed.named_parameters():
            assert torch.equal(param.grad, params[name].grad), \
                f"{kind} {what}: accumulated gradient of {name}"

    for step_index in range(2):
        for module in (eager, graphed):
            module.zero_grad(set_to_none=True)
        compare([True, False, False], f"step {step_index}")
        with torch.no_grad():  # the same update on both twins
            for name, param in graphed.named_parameters():
                params[name].sub_(0.25 * params[name].grad.sign() *
                                  params[name].abs().mean())
                param.copy_(params[name])
        compare([False, False], f"stale casts after step {step_index}")
    for module in (eager, graphed):
        module.zero_grad(set_to_none=True)
    # None replays the casting graphs (eager None casts without keeping).
    compare([None], "None casts")
    want_meta, got_meta = meta_state(eager), meta_state(graphed)
    assert want_meta.keys() == got_meta.keys() and want_meta
    for name, value in want_meta.items():
        assert torch.equal(got_meta[name], value), f"{kind}: FP8 {name}"


@pytest.mark.parametrize("own_pool", [False, True],
                         ids=["default-pool", "caller-pool"])
@pytest.mark.parametrize("fp8", [False, True], ids=["bf16", "fp8"])
def test_graph_gradients_accumulate(fp8, own_pool):
    """Gradients of three replays accumulate into .grad as three eager
    backwards do, bit for bit. The graphed backward hands out its graph's
    static buffers, and autograd keeps the first one as .grad without a
    copy; unless tejit copies it before the next replay, that replay
    overwrites it (PyTorch issue 181723). With a caller-given memory pool
    (own_pool) the copy is made at once."""
    fp8_recipe = hybrid() if fp8 else None
    kwargs = {"pool": torch.cuda.graph_pool_handle()} if own_pool else {}
    eager, graphed, _ = graph_pair(
        lambda: te.LayerNormMLP(256, 1024, params_dtype=BF16), (64, 256),
        fp8_recipe, **kwargs)
    for module in (eager, graphed):
        module.zero_grad(set_to_none=True)
    for index in range(3):
        x = torch.randn(64, 256, device="cuda", dtype=BF16)
        dy = torch.randn_like(x)
        for module in (eager, graphed):
            with te.fp8_autocast(enabled=fp8, fp8_recipe=fp8_recipe):
                out = module(x.detach().requires_grad_())
            out.backward(dy)
    params = dict(eager.named_parameters())
    for name, param in graphed.named_parameters():
        assert torch.equal(param.grad, params[name].grad), \
            f"accumulated gradient of {name}"


def graphed_memory(fp8_weight_caching):
    """Device bytes a graphed LayerNormMLP (hidden 1024, FFN 4096, 4096
    tokens) takes from PyTorch's allocator (its graphs' private pools, the
    static inputs and outputs) and tejit's weight-cast cache, while alive."""
    import gc
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.manual_seed(SEED)
    module = te.LayerNormMLP(1024, 4096, params_dtype=BF16)
    sample = torch.randn(4096, 1024, device="cuda", dtype=BF16,
                         requires_grad=True)
    before = torch.cuda.memory_reserved()
    graphed = te.make_graphed_callables(module, (sample,), fp8_enabled=True,
                                        fp8_recipe=hybrid(),
                                        fp8_weight_caching=fp8_weight_caching)
    torch.cuda.synchronize()
    reserved = torch.cuda.memory_reserved() - before
    cache = sum(c.program.weight_cast_cache_bytes
                for c in module._programs.values())
    del graphed, module, sample
    return reserved, cache


def test_fp8_weight_caching_holds_one_graph_set():
    """fp8_weight_caching=True captures one graph set, as TE does (its
    weight casts read a device flag): the graphs take no more of PyTorch's
    memory than those captured without caching (two sets, one per
    is_first_microbatch, would take about twice); the casts kept are
    2 bytes per weight element (the cast and its transpose) and a few
    scale_inv copies."""
    plain, _ = graphed_memory(False)
    caching, cache = graphed_memory(True)
    weights = 2 * 1024 * 4096  # fc1 and fc2
    assert 2 * weights <= cache <= 2 * weights + (1 << 20), cache
    assert caching <= 1.1 * plain + (4 << 20), (plain, caching)


def test_keyword_arguments_become_graph_inputs():
    """A Llama-style layer graphed with its rotary table as a keyword
    argument (and a fixed mask type): steps equal an eager twin's bit for
    bit; a call that changes the fixed value or leaves out the table is
    refused."""
    torch.manual_seed(SEED)
    eager = te.TransformerLayer(256, 512, 8, num_gqa_groups=2,
                                hidden_dropout=0.0, attention_dropout=0.0,
                                normalization="RMSNorm", activation="swiglu",
                                bias=False, params_dtype=BF16)
    perturb(eager)
    graphed = copy.deepcopy(eager)
    rope = te.attention.RotaryPositionEmbedding(eager.kv_channels)(64)
    sample = torch.randn(64, 2, 256, device="cuda", dtype=BF16,
                         requires_grad=True)
    fp8_recipe = hybrid()
    graphed = te.make_graphed_callables(
        graphed, (sample,), fp8_enabled=True, fp8_recipe=fp8_recipe,
        sample_kwargs={"rotary_pos_emb": rope,
                       "self_attn_mask_type": "causal"})
    for index in range(3):
        x = torch.randn(64, 2, 256, device="cuda", dtype=BF16)
        dy = torch.randn_like(x)
        want = step(eager, x, dy, fp8_recipe, rotary_pos_emb=rope)
        got = step(graphed, x, dy, fp8_recipe, rotary_pos_emb=rope,
                   self_attn_mask_type="causal")
        assert torch.equal(got[0], want[0]), f"output, step {index}"
        assert torch.equal(got[1], want[1]), f"input gradient, step {index}"
        for name, grad in want[2].items():
            assert torch.equal(got[2][name], grad), \
                f"gradient of {name}, step {index}"
    x = sample.detach()
    with pytest.raises(ValueError, match="self_attn_mask_type"):
        graphed(x, rotary_pos_emb=rope, self_attn_mask_type="no_mask")
    with pytest.raises(TypeError, match="rotary_pos_emb"):
        graphed(x)


@pytest.mark.parametrize("fp8", [None, "delayed", "block"],
                         ids=["bf16", "fp8", "block"])
def test_grouped_linear_graph_with_fixed_splits(fp8):
    """GroupedLinear graphed with its m_splits fixed at capture (capacity-
    padded routing; an empty expert among them): steps equal an eager
    twin's bit for bit (outputs, input and parameter gradients, FP8
    state), also under Float8BlockScaling (block casts and block-scaled
    grouped GEMMs in the graph); a graphed call with other splits is
    refused."""
    splits = [32, 0, 48, 48]
    torch.manual_seed(SEED)
    eager = te.GroupedLinear(4, 256, 512, params_dtype=BF16)
    perturb(eager)
    graphed = copy.deepcopy(eager)
    fp8_recipe = {None: None, "delayed": hybrid,
                  "block": recipe.Float8BlockScaling}[fp8]
    fp8_recipe = fp8_recipe() if fp8_recipe else None
    sample = torch.randn(128, 256, device="cuda", dtype=BF16,
                         requires_grad=True)
    graphed = te.make_graphed_callables(
        graphed, (sample,), fp8_enabled=fp8 is not None,
        fp8_recipe=fp8_recipe,
        sample_kwargs={"m_splits": splits})
    for index in range(STEPS):
        x = torch.randn(128, 256, device="cuda", dtype=BF16)
        dy = torch.randn(128, 512, device="cuda", dtype=BF16)
        want = step(eager, x, dy, fp8_recipe, m_splits=splits)
        got = step(graphed, x, dy, fp8_recipe, m_splits=splits)
        assert torch.equal(got[0], want[0]), f"output, step {index}"
        assert torch.equal(got[1], want[1]), f"input gradient, step {index}"
        for name, grad in want[2].items():
            assert torch.equal(got[2][name], grad), \
                f"gradient of {name}, step {index}"
    want_meta, got_meta = meta_state(eager), meta_state(graphed)
    for name, value in want_meta.items():
        assert torch.equal(got_meta[name], value), f"FP8 state {name}"
    if fp8 == "delayed":
        assert torch.count_nonzero(
            want_meta["fp8_meta.bwd.amax_history"]) > 0, "no amax recorded"
    with pytest.raises(ValueError, match="m_splits"):
        graphed(sample.detach(), m_splits=[48, 0, 32, 48])


def test_layernorm_mlp_full_size_graph():
    """The quickstart's MLP block: graphed steps equal eager ones, and the
    step time of both (printed; the benchmark compares them properly)."""
    eager, graphed = assert_same_steps(
        lambda: te.LayerNormMLP(4096, 16384, params_dtype=BF16),
        (8192, 4096), hybrid(), "LayerNormMLP full size fp8", steps=2)
    x = torch.randn(8192, 4096, device="cuda", dtype=BF16)
    dy = torch.randn_like(x)
    times = {}
    for name, module in (("eager", eager), ("graphed", graphed)):
        for _ in range(3):
            step(module, x, dy, hybrid())
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(10):
            step(module, x, dy, hybrid())
        torch.cuda.synchronize()
        times[name] = (time.perf_counter() - start) * 100
    print(f"LayerNormMLP full size fp8: eager {times['eager']:.2f} ms, "
          f"graphed {times['graphed']:.2f} ms a step (with clones)")
