"""FP8GlobalStateManager: Transformer Engine's class-level view of the FP8
state, which training frameworks (Megatron-LM, NeMo) query
(`transformer_engine.pytorch.fp8.FP8GlobalStateManager`).

tejit keeps that state in context variables (fp8.py: the innermost
autocast, the innermost fp8_model_init) and each compiled program owns its
DelayedScaling state, reducing amaxes (the autocast's group) and updating
scales itself at the end of its forward and of its backward. So the
manager's queries read the context variables, and the step TE runs from
the manager after each forward and backward
(`reduce_and_update_fp8_tensors`) has nothing left to do: it is accepted
and does nothing. What tejit has no counterpart for (calibration, the
skip-weight-update tensor of TE's graphed microbatches) is refused with a
message naming the alternative.
"""
import torch

from . import fp8


class FP8GlobalStateManager:
    """Class methods only, as TE's; no instances."""

    @classmethod
    def is_fp8_available(cls):
        """(available, reason): DelayedScaling / Float8CurrentScaling."""
        return fp8.check_fp8_support()

    @classmethod
    def is_fp8_block_scaling_available(cls):
        return fp8.check_fp8_block_scaling_support()

    @classmethod
    def is_mxfp8_available(cls):
        return fp8.check_mxfp8_support()

    @classmethod
    def is_nvfp4_available(cls):
        return fp8.check_nvfp4_support()

    @staticmethod
    def get_meta_tensor_key(forward=True):
        """TE's key of a module's forward / backward scaling state in
        `fp8_meta`."""
        return "scaling_fwd" if forward else "scaling_bwd"

    @staticmethod
    def get_fwd_bwd_key(forward=True):
        return "forward" if forward else "backward"

    @classmethod
    def is_fp8_enabled(cls):
        """Whether the innermost autocast enables FP8."""
        return fp8.is_fp8_enabled()

    @classmethod
    def is_fp8_calibration(cls):
        """Always False: autocast(calibrating=True) is refused."""
        return False

    @classmethod
    def with_fp8_parameters(cls):
        """Whether modules built now get FP8 primary weights (an enabled
        fp8_model_init is active)."""
        return fp8.get_fp8_model_init() is not None

    @classmethod
    def with_high_precision_init_val(cls):
        init = fp8.get_fp8_model_init()
        return init is not None and init.preserve_high_precision_init_val

    @classmethod
    def fp8_graph_capturing(cls):
        """Whether a CUDA graph is being captured on the current stream."""
        return torch.cuda.is_available() and \
            torch.cuda.is_current_stream_capturing()

    @classmethod
    def get_fp8_recipe(cls):
        """The innermost enabled autocast's recipe, else the default one
        (TE answers the same outside an autocast)."""
        recipe = fp8.get_fp8_recipe()
        return recipe if recipe is not None else fp8.get_default_fp8_recipe()

    @classmethod
    def get_fp8_group(cls):
        return fp8.get_fp8_group()

    @classmethod
    def get_autocast_state(cls):
        """A snapshot of the autocast state, for set_autocast_state (TE's
        graphed callables and activation recomputation restore the
        forward's state this way)."""
        return fp8.autocast_state()

    @classmethod
    def set_autocast_state(cls, state):
        """Makes `state` (from get_autocast_state) the current autocast
        state; an enclosing autocast's exit restores its own."""
        fp8.set_autocast_state(state)

    # TE 1.x's names of the two above.
    get_fp8_autocast_state = get_autocast_state
    set_fp8_autocast_state = set_autocast_state

    @classmethod
    def reduce_and_update_fp8_tensors(cls, forward=True):
        """Accepted, and nothing to do: every tejit program reduces its
        amaxes and updates its DelayedScaling state at the end of its own
        forward and backward."""
        del forward

    @classmethod
    def reset(cls):
        """Back to no autocast and no fp8_model_init in this context."""
        fp8.set_autocast_state(fp8.NO_AUTOCAST)
        fp8.reset_model_init()

    @classmethod
    def set_skip_fp8_weight_update_tensor(cls, skip):
        raise NotImplementedError(
            "FP8GlobalStateManager.set_skip_fp8_weight_update_tensor is not "
            "supported by tejit: pass is_first_microbatch to the modules' "
            "forward (False reuses the first micro-batch's FP8 weight casts, "
            "also inside CUDA graphs)")

    @classmethod
    def get_skip_fp8_weight_update_tensor(cls):
        """None: tejit keeps no such tensor (see
        set_skip_fp8_weight_update_tensor)."""
        return None
