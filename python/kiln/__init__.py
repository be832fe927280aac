"""kiln: JIT-compiled LLM inference kernels (vLLM's custom ops), callable from Python.

Tensors cross into kiln through DLPack without a copy: any NumPy array or torch tensor (or
anything else with ``__dlpack__``) can be passed, and ops write in place into the arrays you
give them, exactly like ``torch.ops._C.<op>``.

NumPy has no bfloat16 or fp8 dtypes. Such data crosses as same-width integer arrays wrapped in
:class:`kiln.Tensor` with an explicit dtype (``kiln.Tensor(a_uint16, "bf16")``); fp8 caches may
also be plain ``uint8`` arrays wherever vLLM accepts ``uint8`` caches. :func:`bf16_bits` and
:func:`from_bf16_bits` convert float32 arrays to and from bfloat16 bit patterns.

Entry points:
    kiln.ops.<op>(...)        every op, vLLM's argument names/order, in place
    kiln.compile(spec, backend=None)  a Kernel for spec text; backend="ref" forces the reference
    kiln.prewarm(path)        compile a manifest of specs up front
    kiln.cache_info()         the runtime's cache counters
Errors: kiln.InvalidArgumentError (a ValueError) names the bad argument; kiln.DTypeError
(also a TypeError) is a wrong dtype; kiln.Error (a RuntimeError) is any other kiln failure.
"""

from __future__ import annotations

from . import _kiln
from ._kiln import (  # noqa: F401  (re-exported)
    DTypeError,
    Error,
    InvalidArgumentError,
    Kernel,
    Tensor,
    cache_info,
    canonical_spec,
    prewarm,
)
from . import ops  # noqa: F401

__all__ = [
    "DTypeError",
    "Error",
    "InvalidArgumentError",
    "Kernel",
    "Tensor",
    "bf16_bits",
    "cache_info",
    "canonical_spec",
    "compile",
    "from_bf16_bits",
    "ops",
    "prewarm",
]


def compile(spec, backend=None, isa=None, use_disk_cache=True):  # noqa: A001 (kiln's name)
    """Compiles (or finds in memory) the kernel of ``spec``.

    ``spec`` is spec text such as ``"rms_norm(dtype=f32,hidden=4096)"`` (see docs/ops.md).
    ``backend`` forces one backend (``"ref"`` is the scalar reference every backend is tested
    against); ``isa`` caps the x86 ISA (``"avx2"``). The returned :class:`Kernel` runs with
    ``kernel.run(tensors, scalars)`` in the op's KernelArgs order.
    """
    return _kiln.compile(str(spec), backend=backend, isa=isa, use_disk_cache=use_disk_cache)


def bf16_bits(x):
    """float32 NumPy array -> uint16 array of bfloat16 bits (round to nearest even; NaN kept)."""
    import numpy as np

    f = np.ascontiguousarray(x, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def from_bf16_bits(bits):
    """uint16 array of bfloat16 bits -> float32 array (exact)."""
    import numpy as np

    b = np.asarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << 16).view(np.float32)
