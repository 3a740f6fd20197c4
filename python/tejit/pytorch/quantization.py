"""TE 2.x's `transformer_engine.pytorch.quantization`: the same names as
fp8.py (TE 1.x's `transformer_engine.pytorch.fp8`, which TE 2.x keeps), so
that either import path works."""
from .fp8 import (FP8GlobalStateManager, autocast,
                  check_fp8_block_scaling_support, check_fp8_support,
                  check_mxfp8_support, check_nvfp4_support, fp8_autocast,
                  fp8_model_init, get_default_fp8_recipe, get_default_recipe,
                  is_fp8_available, is_fp8_block_scaling_available,
                  is_mxfp8_available, is_nvfp4_available,
                  quantized_model_init)

__all__ = ["autocast", "fp8_autocast", "quantized_model_init",
           "fp8_model_init", "is_fp8_available", "is_mxfp8_available",
           "is_fp8_block_scaling_available", "is_nvfp4_available",
           "check_fp8_support", "check_fp8_block_scaling_support",
           "check_mxfp8_support", "check_nvfp4_support",
           "get_default_recipe", "get_default_fp8_recipe",
           "FP8GlobalStateManager"]
