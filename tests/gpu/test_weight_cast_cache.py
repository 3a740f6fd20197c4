"""GPU tests of the weight-cast cache of inference programs: an inference
forward (eval mode, torch.no_grad()) keeps the FP8 casts of the weights and
the next forward skips them, as long as nothing they were made from moved.

    PYTHONPATH=python python3 -m pytest tests/gpu/test_weight_cast_cache.py

Each check compares against the same forward of an independent copy of the
module (copy.deepcopy: fresh programs, no cache), bit for bit:
- a second forward skips the casts and gives the first's output, under
  DelayedScaling and Float8CurrentScaling;
- after an in-place change of a weight (torch moves its version on), a
  training step (new FP8 scales) or load_state_dict, the next forward casts
  again and matches the copy made after the change;
- a forward captured in a CUDA graph casts at every replay: replayed after
  a weight changed, it matches the copy;
- TE's is_first_microbatch: True casts even when nothing changed; False
  reuses the casts even after a change (the caller's promise), until a
  forward with True; a forward captured with False skips the casts, and
  its replays read the casts of the latest forward that made them (the
  weights changed and recast by an eager forward: the replay matches the
  copy); captured with False over stale casts (the FP8 state written
  since): a warning, and the graph casts;
- TEJIT_WEIGHT_CAST_CACHE=0 when the program is made: no cache, nothing
  skipped.
"""
import copy

import pytest

from gpu_test_support import hybrid, perturb, run_seed, torch

import tejit.pytorch as te  # noqa: E402
from tejit.common import recipe  # noqa: E402

SEED = run_seed("test_weight_cast_cache")
BF16 = torch.bfloat16
RECIPES = {"delayed": hybrid,
           "current": lambda: recipe.Float8CurrentScaling(
               fp8_format=recipe.Format.HYBRID)}


@pytest.fixture(autouse=True)
def fresh_seed():
    torch.manual_seed(SEED)


def make_layer(fp8_recipe):
    """A small TransformerLayer after two FP8 training steps (scales set),
    in eval mode, and an input."""
    layer = te.TransformerLayer(256, 1024, 4, hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=BF16)
    perturb(layer)
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16)
    train_step(layer, x, fp8_recipe)
    train_step(layer, x, fp8_recipe)
    layer.eval()
    return layer, x


def train_step(layer, x, fp8_recipe):
    layer.train()
    with te.fp8_autocast(enabled=True, fp8_recipe=fp8_recipe):
        y = layer(x.clone().requires_grad_())
    y.float().square().mean().backward()
    layer.zero_grad(set_to_none=True)
    layer.eval()


def infer(layer, x, fp8_recipe, **kwargs):
    with torch.no_grad(), te.fp8_autocast(enabled=True,
                                          fp8_recipe=fp8_recipe):
        return layer(x, **kwargs)


def inference_program(layer):
    programs = [c for c in layer._programs.values() if not c.training]
    assert len(programs) == 1, "one inference program expected"
    return programs[0].program


def fresh(layer, x, fp8_recipe):
    """The same forward by an independent copy (no cache)."""
    return infer(copy.deepcopy(layer), x, fp8_recipe)


@pytest.mark.parametrize("name", list(RECIPES))
def test_second_forward_reuses_the_casts(name):
    fp8_recipe = RECIPES[name]()
    layer, x = make_layer(fp8_recipe)
    first = infer(layer, x, fp8_recipe)
    program = inference_program(layer)
    assert program.weight_cast_cache_bytes > 0
    assert program.skipped_steps == 0
    second = infer(layer, x, fp8_recipe)
    # The QKV, projection, fc1 and fc2 weight casts at least.
    assert program.skipped_steps >= 4, program.skipped_steps
    assert torch.equal(first, second)
    assert torch.equal(second, fresh(layer, x, fp8_recipe))
    # A new input reuses them too, and computes what a copy computes.
    other = torch.randn_like(x)
    assert torch.equal(infer(layer, other, fp8_recipe),
                       fresh(layer, other, fp8_recipe))
    assert program.skipped_steps >= 4


@pytest.mark.parametrize("change", ["in_place", "training_step",
                                    "load_state_dict"])
def test_a_change_casts_again(change):
    fp8_recipe = hybrid()
    layer, x = make_layer(fp8_recipe)
    infer(layer, x, fp8_recipe)
    before = infer(layer, x, fp8_recipe)
    program = inference_program(layer)
    assert program.skipped_steps > 0
    if change == "in_place":
        with torch.no_grad():
            layer.layernorm_mlp.fc1_weight.mul_(1.5)
    elif change == "training_step":
        train_step(layer, x, fp8_recipe)
    else:
        state = copy.deepcopy(layer.state_dict())
        with torch.no_grad():
            state["layernorm_mlp.fc2_weight"] *= -1.0
        layer.load_state_dict(state)
    after = infer(layer, x, fp8_recipe)
    assert program.skipped_steps == 0, f"{change}: the casts were reused"
    if change != "training_step":  # same data: the scales may not move
        assert not torch.equal(after, before), f"{change} changed nothing"
    assert torch.equal(after, fresh(layer, x, fp8_recipe))
    # And then they are kept again.
    infer(layer, x, fp8_recipe)
    assert program.skipped_steps > 0


def test_a_captured_forward_casts_at_every_replay():
    fp8_recipe = hybrid()
    layer, x = make_layer(fp8_recipe)
    infer(layer, x, fp8_recipe)
    infer(layer, x, fp8_recipe)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        infer(layer, x, fp8_recipe)  # on the capture stream once, eagerly
        with torch.cuda.graph(graph, stream=stream):
            out = infer(layer, x, fp8_recipe)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.no_grad():
        layer.self_attention.proj.weight.mul_(0.5)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, fresh(layer, x, fp8_recipe))
    # The capture did not count as a forward that cast: the next eager
    # forward casts.
    eager = infer(layer, x, fp8_recipe)
    assert inference_program(layer).skipped_steps == 0
    assert torch.equal(eager, out)


@pytest.mark.parametrize("name", list(RECIPES))
def test_is_first_microbatch(name):
    fp8_recipe = RECIPES[name]()
    layer, x = make_layer(fp8_recipe)
    first = infer(layer, x, fp8_recipe, is_first_microbatch=True)
    program = inference_program(layer)
    infer(layer, x, fp8_recipe, is_first_microbatch=True)
    assert program.skipped_steps == 0, "True must cast"
    assert torch.equal(infer(layer, x, fp8_recipe, is_first_microbatch=False),
                       first)
    assert program.skipped_steps >= 4
    # False: the weights are promised unchanged, so a change is not seen...
    expected_old = fresh(layer, x, fp8_recipe)
    with torch.no_grad():
        layer.layernorm_mlp.fc1_weight.mul_(1.5)
    stale = infer(layer, x, fp8_recipe, is_first_microbatch=False)
    assert program.skipped_steps >= 4
    assert torch.equal(stale, expected_old)
    # ...until a forward with True (or None, which sees the new version).
    renewed = infer(layer, x, fp8_recipe, is_first_microbatch=True)
    assert program.skipped_steps == 0
    assert not torch.equal(renewed, stale)
    assert torch.equal(renewed, fresh(layer, x, fp8_recipe))
    assert torch.equal(infer(layer, x, fp8_recipe), renewed)
    assert program.skipped_steps >= 4


def capture(layer, x, fp8_recipe, **kwargs):
    """A CUDA graph of one inference forward, and its output tensor."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with torch.cuda.graph(graph, stream=stream):
            out = infer(layer, x, fp8_recipe, **kwargs)
    torch.cuda.current_stream().wait_stream(stream)
    return graph, out


@pytest.mark.parametrize("name", list(RECIPES))
def test_graph_captured_with_cached_casts(name):
    fp8_recipe = RECIPES[name]()
    layer, x = make_layer(fp8_recipe)
    infer(layer, x, fp8_recipe, is_first_microbatch=True)
    program = inference_program(layer)
    static_x = torch.randn_like(x)
    graph, out = capture(layer, static_x, fp8_recipe,
                         is_first_microbatch=False)
    assert program.skipped_steps >= 4, "the capture cast the weights"
    for _ in range(2):
        static_x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, fresh(layer, static_x, fp8_recipe))
    # New weights, cast by an eager forward: the replays read those casts.
    with torch.no_grad():
        layer.self_attention.proj.weight.mul_(0.5)
        layer.layernorm_mlp.fc2_weight.mul_(-1.0)
    infer(layer, x, fp8_recipe, is_first_microbatch=True)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, fresh(layer, static_x, fp8_recipe))


def test_graph_captured_with_false_over_stale_casts_warns_and_casts():
    fp8_recipe = hybrid()
    layer, x = make_layer(fp8_recipe)
    # Casts kept, then the FP8 state written (as loading a checkpoint
    # does): they are stale, and a capture cannot cast eagerly first.
    infer(layer, x, fp8_recipe)
    compiled = next(c for c in layer._programs.values() if not c.training)
    name = "fp8_meta.fwd.scale"
    compiled.write_meta(name, compiled.read_meta(name))
    torch.cuda.synchronize()
    with pytest.warns(UserWarning, match="casts the weights at every replay"):
        graph, out = capture(layer, x, fp8_recipe, is_first_microbatch=False)
    assert inference_program(layer).skipped_steps == 0
    with torch.no_grad():
        layer.layernorm_mlp.fc1_weight.mul_(2.0)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, fresh(layer, x, fp8_recipe))


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("TEJIT_WEIGHT_CAST_CACHE", "0")
    fp8_recipe = hybrid()
    layer, x = make_layer(fp8_recipe)
    infer(layer, x, fp8_recipe)
    second = infer(layer, x, fp8_recipe)
    program = inference_program(layer)
    assert program.weight_cast_cache_bytes == 0
    assert program.skipped_steps == 0
    monkeypatch.delenv("TEJIT_WEIGHT_CAST_CACHE")
    assert torch.equal(second, fresh(layer, x, fp8_recipe))



@pytest.mark.parametrize("fuse_qkv_params", [False, True])
def test_kept_parameter_arguments_follow_changes(fuse_qkv_params):
    """Inference calls reuse the parameter tensors they gave the program
    (no FP8 here: no weight casts): in-place changes and replaced
    parameters are still seen."""
    layer = te.TransformerLayer(256, 1024, 4, hidden_dropout=0.0,
                                attention_dropout=0.0, params_dtype=BF16,
                                fuse_qkv_params=fuse_qkv_params).eval()
    perturb(layer)
    x = torch.randn(64, 2, 256, device="cuda", dtype=BF16)

    def bf16(module):
        with torch.no_grad():
            return module(x)

    first = bf16(layer)
    assert torch.equal(bf16(layer), first)
    qkv = (layer.self_attention.layernorm_qkv.weight if fuse_qkv_params
           else layer.self_attention.layernorm_qkv.query_weight)
    with torch.no_grad():
        qkv.mul_(1.5)
    changed = bf16(layer)
    assert not torch.equal(changed, first)
    assert torch.equal(changed, bf16(copy.deepcopy(layer)))
    layer.layernorm_mlp.fc2_weight = torch.nn.Parameter(
        -layer.layernorm_mlp.fc2_weight.detach())
    replaced = bf16(layer)
    assert not torch.equal(replaced, changed)
    assert torch.equal(replaced, bf16(copy.deepcopy(layer)))


def test_deep_copy_keeps_split_qkv_in_one_buffer():
    """copy.deepcopy gives each parameter its own tensor; the copy packs
    query/key/value back into one buffer (as .to() does), so its programs
    take the same tensor every call and can keep their casts."""
    from tejit.pytorch.module import _groups
    layer = te.TransformerLayer(256, 1024, 4, params_dtype=BF16)
    twin = copy.deepcopy(layer)
    for module in (layer, twin):
        for kind in ("weight", "bias"):
            assert _groups.adjacent(
                module.self_attention.layernorm_qkv._split(kind)), kind
    for ours, theirs in zip(twin.parameters(), layer.parameters()):
        assert ours.data_ptr() != theirs.data_ptr()
        assert torch.equal(ours, theirs)
