"""CudaRNGStatesTracker: Transformer Engine's (and Megatron-LM's) named
CUDA RNG states, exported by tejit.pytorch.distributed.

A tensor-parallel model draws some random numbers identically on every
rank (the data-parallel stream: torch's default generator) and some
differently per rank (the model-parallel stream: weight initialization of
split weights, attention dropout). The tracker holds the extra streams as
named generator states; `fork(name)` runs a block on one of them and keeps
where it got to. tejit's modules take the tracker as
`get_rng_state_tracker` (a function returning it) and fork it to
initialize their split weights and to draw each training program's dropout
seed; `checkpoint` saves and restores its states around a recomputation.
"""
import contextlib

import torch

# The default stream name, TE's and Megatron-LM's.
MODEL_PARALLEL_RNG = "model-parallel-rng"


class CudaRNGStatesTracker:
    """Named states of the current device's CUDA generator."""

    def __init__(self):
        self.reset()

    def reset(self):
        """Forgets every state and seed."""
        self.states_ = {}
        self.seeds_ = set()

    def is_initialized(self):
        return bool(self.states_)

    def get_states(self):
        """A copy of the name -> state map (states are not cloned: fork
        replaces a state rather than writing into it)."""
        return dict(self.states_)

    def set_states(self, states):
        """Replaces the map (e.g. with one from get_states)."""
        self.states_ = dict(states)

    def add(self, name, seed):
        """A new stream `name`, seeded with `seed`. Each name and each seed
        may be added once (two streams with one seed would repeat each
        other's numbers)."""
        if seed in self.seeds_:
            raise ValueError(f"CudaRNGStatesTracker: seed {seed} was already "
                             f"added")
        if name in self.states_:
            raise ValueError(f"CudaRNGStatesTracker: a state named "
                             f"{name!r} was already added")
        self.seeds_.add(seed)
        outer = torch.cuda.get_rng_state()
        try:
            torch.cuda.manual_seed(seed)
            self.states_[name] = torch.cuda.get_rng_state()
        finally:
            torch.cuda.set_rng_state(outer)

    @contextlib.contextmanager
    def fork(self, name=MODEL_PARALLEL_RNG):
        """Runs the block on stream `name`, then stores where the stream got
        to and puts the outer generator state back."""
        if name not in self.states_:
            raise KeyError(f"CudaRNGStatesTracker: no state named {name!r} "
                           f"(add(name, seed) first; known: "
                           f"{sorted(self.states_)})")
        outer = torch.cuda.get_rng_state()
        torch.cuda.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.cuda.get_rng_state()
            torch.cuda.set_rng_state(outer)
