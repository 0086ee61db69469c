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


#: the device kinds oodeval trains on; a spec is one of these, ``cuda:N``, or ``"auto"``
DEVICE_KINDS = ("cpu", "cuda")
#: the spec meaning "cuda when this machine has it, else cpu" (`resolve_device`)
AUTO_DEVICE = "auto"


def device_problem(spec: object) -> str | None:
    """What is wrong with the *spelling* of a device spec, or None (no torch, no hardware check).

    Accepted: ``"cpu"``, ``"cuda"``, ``"cuda:N"`` (N a non-negative integer) and ``"auto"``.

    >>> device_problem("cuda:1") is None, device_problem("gpu")
    (True, "unknown device 'gpu'; use cpu, cuda, cuda:N or auto")
    """
    if not isinstance(spec, str):
        return f"a device must be a string (cpu, cuda, cuda:N or auto), got {spec!r}"
    kind, colon, index = spec.partition(":")
    if spec in (*DEVICE_KINDS, AUTO_DEVICE):
        return None
    if kind == "cuda" and colon and index.isascii() and index.isdigit():
        if index == str(int(index)):  # torch refuses "cuda:01"
            return None
    return f"unknown device {spec!r}; use cpu, cuda, cuda:N or auto"


def check_device_spec(spec: object) -> str:
    """`spec` when it is spelled right (`device_problem`), else an OodevalError naming it."""
    from oodeval.errors import OodevalError

    problem = device_problem(spec)
    if problem is not None:
        raise OodevalError(problem)
    return str(spec)


def cuda_count() -> int:
    """The number of CUDA devices torch can use here (0 without CUDA or on a CPU-only build)."""
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(spec: str) -> str:
    """The device `spec` means on this machine, as a string torch accepts; never a silent CPU.

    ``"auto"`` is ``"cuda"`` when CUDA is available, else ``"cpu"``; ``"cuda"`` and ``"cuda:N"``
    need CUDA (and N < the device count): otherwise an OodevalError names the device asked for.
    This is the one check of a device spec, used by the trainer, the study config, the CLI and
    GMoP training.

    >>> resolve_device("cpu")
    'cpu'
    """
    from oodeval.errors import OodevalError

    spec = check_device_spec(spec)
    if spec == "cpu":
        return spec
    count = cuda_count()
    if spec == AUTO_DEVICE:
        return "cuda" if count else "cpu"
    if count == 0:
        raise OodevalError(
            f"device {spec!r} requested but CUDA is not available here (no GPU, or a CPU-only "
            "torch build); use device cpu or auto"
        )
    index = spec.partition(":")[2]
    if index and int(index) >= count:
        raise OodevalError(
            f"device {spec!r} requested but this machine has {count} CUDA device(s) "
            f"(cuda:0 to cuda:{count - 1})"
        )
    return spec


def device_kind(spec: str) -> str:
    """The kind of a device spec, ``"cpu"`` or ``"cuda"`` (``"auto"`` resolved on this machine).

    Units trained on devices of one kind compare (``cuda:0`` and ``cuda:1`` run the same kernels);
    a CPU and a GPU give slightly different numbers.

    >>> device_kind("cuda:1"), device_kind("cpu")
    ('cuda', 'cpu')
    """
    spec = check_device_spec(spec)
    if spec == AUTO_DEVICE:
        return "cuda" if cuda_count() else "cpu"
    return spec.partition(":")[0]


def deterministic_device(device: str) -> None:
    """Make this process's torch deterministic on `device` (same seed, same numbers).

    The CPU kernels oodeval uses are deterministic already, so ``"cpu"`` changes nothing. On CUDA
    this sets ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (cuBLAS is deterministic only with a fixed
    workspace; it is read when cuBLAS starts, so set before the first product), turns cuDNN's
    benchmark autotuning off and asks for deterministic algorithms (an op without one raises
    instead of giving other numbers on the next run).
    """
    if device_kind(device) == "cpu":
        return
    import os

    import torch

    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True
    torch.use_deterministic_algorithms(True)


#: values of the trainer's ``tf32`` option (``[trainer] tf32``), the default first
TF32_MODES = ("default", "off")


@contextmanager
def tf32_mode(mode: str) -> Iterator[None]:
    """PyTorch's TF32 switches inside the block, as `mode` says; restored after it.

    ``"default"`` sets PyTorch's defaults, which DomainBed ran under, whatever the process had
    set before: cuBLAS matrix products in full float32 (``torch.backends.cuda.matmul.allow_tf32
    = False``) and cuDNN convolutions in TF32 on Ampere and later GPUs
    (``torch.backends.cudnn.allow_tf32 = True``: inputs rounded to 10 mantissa bits, unit
    roundoff 2^-11 instead of 2^-24). ``"off"`` runs both in full float32 (slower convolutions,
    the CPU's rounding). CPUs never use TF32, so on the CPU both modes give the same numbers.
    """
    if mode not in TF32_MODES:
        from oodeval.errors import OodevalError

        raise OodevalError(f"unknown tf32 mode {mode!r}; choose one of {', '.join(TF32_MODES)}")
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = mode == "default"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved
