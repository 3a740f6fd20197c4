"""What the pytest GPU tests of tejit.pytorch share: PyTorch and the
repository's python/ on the path (the module skips without a CUDA GPU),
the run's seed, the FP8 recipe they train with, and non-trivial
parameters."""
import os
import random
import sys
import zlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from tejit.common import recipe  # noqa: E402


def run_seed(test_file):
    """The run's seed: $TEJIT_TEST_SEED, else a fresh one; printed so that
    a failure can be repeated."""
    seed = int(os.environ.get("TEJIT_TEST_SEED",
                              random.SystemRandom().randrange(1 << 31)))
    print(f"{test_file}: seed {seed} (TEJIT_TEST_SEED={seed} repeats this "
          f"run)")
    return seed


def seed_per_test(seed):
    """An autouse fixture (bind it to a module-level name, e.g. `fresh_seed
    = seed_per_test(SEED)`) that seeds torch with the run's `seed` plus a
    hash of the test's name: each test draws from its own stream."""
    @pytest.fixture(autouse=True)
    def fresh_seed(request):
        torch.manual_seed(seed + zlib.crc32(request.node.name.encode()))
    return fresh_seed


def hybrid():
    return recipe.DelayedScaling(fp8_format=recipe.Format.HYBRID,
                                 amax_history_len=16, amax_compute_algo="max")


def perturb(module):
    """Non-trivial biases and norm weights (TE starts them at 0 and 1)."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn_like(p))
            elif p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))


def input_gradient(module, x, dy, fp8_recipe):
    """One forward (under fp8_autocast(fp8_recipe) unless None) and
    backward of `module` on a fresh leaf copy of `x` with output gradient
    `dy`; returns the input's gradient (parameters accumulate theirs)."""
    import tejit.pytorch as te
    x = x.detach().requires_grad_()
    with te.fp8_autocast(enabled=fp8_recipe is not None,
                         fp8_recipe=fp8_recipe):
        out = module(x)
    out.backward(dy)
    return x.grad
