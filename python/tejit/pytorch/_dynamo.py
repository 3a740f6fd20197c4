"""What tejit.pytorch marks for torch.compile: the entry points that run
tejit programs (the modules' forwards, the functional ops) are opaque to
TorchDynamo, as Transformer Engine marks its own. Dynamo could not trace
them (a program takes raw device addresses); the compiled graph breaks
around each call, which runs as in eager mode."""
import functools

import torch


def outside_torch_compile(function):
    """`function`, run as it is when a torch.compile'd model calls it."""
    disable = getattr(getattr(torch, "_dynamo", None), "disable", None)
    if disable is None:
        return function
    return functools.wraps(function)(disable(function, recursive=True))
