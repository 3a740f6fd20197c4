"""Framework-independent parts of tejit's Transformer Engine API, as
`transformer_engine.common`: `from tejit.common import recipe`."""
from . import recipe

__all__ = ["recipe"]
