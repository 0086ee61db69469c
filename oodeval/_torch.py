"""Small torch helpers shared by the parts of oodeval that train networks.

torch is imported inside each function, so importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def single_threaded() -> Iterator[None]:
    """Run torch on one intra-op thread inside the block, then restore the previous setting.

    oodeval's networks (the shift hypotheses, GMoP's context maps, the small encoders) are tiny:
    on a shared CPU, torch's thread pool costs far more in synchronisation than it gains
    (measured 7x slower with 2 threads under load for the shift metrics, more than 10x for GMoP).

    >>> import torch
    >>> before = torch.get_num_threads()
    >>> with single_threaded():
    ...     torch.get_num_threads()
    1
    >>> torch.get_num_threads() == before
    True
    """
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)
