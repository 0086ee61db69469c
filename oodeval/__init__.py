"""oodeval: trustworthy evaluation of models under distribution shift."""

from oodeval.errors import OodevalError

__version__ = "0.1.0"
__all__ = ["OodevalError", "__version__"]
