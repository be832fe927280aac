"""kiln's ops with vLLM's signatures (argument names, order and in-place semantics).

Each function reads the kernel's compile-time parameters off its arguments' shapes and dtypes,
compiles it on first use (memoised; later calls find it in memory) and runs it on the arrays
you pass, without copying them. Bad arguments raise kiln.InvalidArgumentError (a ValueError)
or kiln.DTypeError (a TypeError) whose message names the argument; nothing is written then.
"""

from __future__ import annotations

from ._kiln import ops as _ops
from ._kiln.ops import *  # noqa: F401,F403

__all__ = [name for name in dir(_ops) if not name.startswith("_")] + [
    "cpu_attn_get_scheduler_metadata"
]


def cpu_attn_get_scheduler_metadata(
    num_reqs,
    num_heads,
    num_kv_heads,
    head_dim,
    seq_lens,
    dtype,
    query_start_loc,
    causal,
    sliding_window_size,
    isa,
    enable_kv_split,
):
    """Plans the next cpu_attention_with_kv_cache call and returns the metadata tensor.

    As vLLM: returns a new int8 tensor (a torch tensor when ``seq_lens`` is one, else a NumPy
    array). ``dtype`` is the query dtype (``torch.bfloat16``, ``"bf16"``, ``numpy.float32``).
    """
    import numpy as np

    metadata = np.zeros(_ops.cpu_attn_metadata_bytes(), dtype=np.int8)
    _ops.cpu_attn_get_scheduler_metadata_into(
        metadata, num_reqs, num_heads, num_kv_heads, head_dim, seq_lens, dtype,
        query_start_loc, causal, sliding_window_size, isa, enable_kv_split,
    )
    if type(seq_lens).__module__.startswith("torch"):
        import torch

        return torch.from_dlpack(metadata)
    return metadata
