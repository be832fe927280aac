"""Type stubs of kiln.ops: vLLM's ops, written in place into the arrays passed.

``Array`` is anything with ``__dlpack__`` (NumPy arrays, torch tensors, kiln.Tensor views);
``OptArray`` may also be None (absent). Every op raises kiln.InvalidArgumentError (ValueError)
or kiln.DTypeError (TypeError) naming the bad argument; nothing is written then.
"""

from typing import Any, Optional, Tuple

Array = Any
OptArray = Optional[Any]

# ---- norm, rope, activations
def rms_norm(out: Array, input: Array, weight: OptArray, epsilon: float) -> None:
    """out[r] = input[r] / sqrt(mean(input[r]^2) + epsilon) * weight (out contiguous)."""
def fused_add_rms_norm(input: Array, residual: Array, weight: OptArray, epsilon: float) -> None:
    """In place: residual += input; input = rms_norm(residual) * weight."""
def rotary_embedding(positions: Array, query: Array, key: OptArray, head_size: int,
                     cos_sin_cache: Array, is_neox: bool) -> None:
    """In place rotation of query (and key) by cos_sin_cache[positions]."""
def silu_and_mul(out: Array, input: Array) -> None:
    """out = silu(input[..., :d]) * input[..., d:]."""
def mul_and_silu(out: Array, input: Array) -> None:
    """out = input[..., :d] * silu(input[..., d:])."""
def gelu_and_mul(out: Array, input: Array) -> None:
    """out = gelu_erf(x) * y."""
def gelu_tanh_and_mul(out: Array, input: Array) -> None:
    """out = gelu_tanh(x) * y."""
def fatrelu_and_mul(out: Array, input: Array, threshold: float = 0.0) -> None:
    """out = (x > threshold ? x : 0) * y."""
def swigluoai_and_mul(out: Array, input: Array, alpha: float = 1.702, limit: float = 7.0) -> None:
    """GPT-OSS SwiGLU on interleaved (gate, up) pairs."""

# ---- KV-cache writes, gathers, quantisers
def swap_blocks(src: Array, dst: Array, block_size_in_bytes: int, block_mapping: Array) -> None:
    """dst block d <- src block s for each row (s, d) of block_mapping [N, 2] (int64)."""
def reshape_and_cache(key: Array, value: Array, key_cache: Array, value_cache: Array,
                      slot_mapping: Array, kv_cache_dtype: str, k_scale: Array,
                      v_scale: Array) -> None:
    """key/value [T, H, D] -> legacy paged caches [NB, H, D/x, BS, x] / [NB, H, D, BS]."""
def reshape_and_cache_flash(key: Array, value: Array, key_cache: Array, value_cache: Array,
                            slot_mapping: Array, kv_cache_dtype: str, k_scale: Array,
                            v_scale: Array) -> None:
    """key/value [T, H, D] -> flash caches viewed as [NB, BS, H, D] (NHD or HND storage)."""
def concat_and_cache_mla(kv_c: Array, k_pe: Array, kv_cache: Array, slot_mapping: Array,
                         kv_cache_dtype: str, scale: Array) -> None:
    """MLA entries [kv_c | k_pe] (or 656-byte fp8_ds_mla entries) -> kv_cache [NB, BS, W]."""
def concat_and_cache_mla_rope_fused(positions: Array, q_pe: Array, k_pe: Array, kv_c: Array,
                                    cos_sin_cache: Array, is_neox: bool, slot_mapping: Array,
                                    kv_cache: Array, kv_cache_dtype: str,
                                    kv_cache_scale: Array) -> None:
    """Rotates q_pe and k_pe in place, then writes [kv_c | k_pe]."""
def convert_fp8(dst_cache: Array, src_cache: Array, scale: float = 1.0,
                kv_cache_dtype: str = "fp8") -> None:
    """e4m3 quantise (float -> uint8) or dequantise (uint8 -> float), element-wise."""
def gather_and_maybe_dequant_cache(src_cache: Array, dst: Array, block_table: Array,
                                   cu_seq_lens: Array, token_to_seq: Array, num_tokens: int,
                                   kv_cache_dtype: str, scale: Array,
                                   seq_starts: OptArray = None) -> None:
    """dst[tok] = (dequantised) cache entry of token tok."""
def cp_gather_cache(src_cache: Array, dst: Array, block_table: Array, cu_seq_lens: Array,
                    batch_size: int, seq_starts: OptArray = None) -> None:
    """Copies each request's cache entries into dst rows."""
def cp_gather_and_upconvert_fp8_kv_cache(src_cache: Array, dst: Array, block_table: Array,
                                         seq_lens: Array, workspace_starts: Array,
                                         batch_size: int) -> None:
    """656-byte fp8_ds_mla entries -> bf16 rows of 576."""
def indexer_k_quant_and_cache(k: Array, kv_cache: Array, slot_mapping: Array,
                              quant_block_size: int, kv_cache_dtype: str) -> None:
    """k [T, D] -> DeepSeek indexer cache; kv_cache_dtype is the scale format ('ue8m0')."""
def cp_gather_indexer_k_quant_cache(kv_cache: Array, dst_k: Array, dst_scale: Array,
                                    block_table: Array, cu_seq_lens: Array) -> None:
    """Indexer cache -> value rows dst_k and scale bytes dst_scale."""

# ---- attention, sparse indices, top-k
def paged_attention_v1(out: Array, query: Array, key_cache: Array, value_cache: Array,
                       num_kv_heads: int, scale: float, block_tables: Array, seq_lens: Array,
                       block_size: int, max_seq_len: int, alibi_slopes: OptArray,
                       kv_cache_dtype: str, k_scale: OptArray, v_scale: OptArray,
                       tp_rank: int = 0, blocksparse_local_blocks: int = 0,
                       blocksparse_vert_stride: int = 0, blocksparse_block_size: int = 64,
                       blocksparse_head_sliding_step: int = 0) -> None:
    """Decode attention against the legacy paged cache."""
def paged_attention_v2(out: Array, exp_sums: Array, max_logits: Array, tmp_out: Array,
                       query: Array, key_cache: Array, value_cache: Array, num_kv_heads: int,
                       scale: float, block_tables: Array, seq_lens: Array, block_size: int,
                       max_seq_len: int, alibi_slopes: OptArray, kv_cache_dtype: str,
                       k_scale: OptArray, v_scale: OptArray, tp_rank: int = 0,
                       blocksparse_local_blocks: int = 0, blocksparse_vert_stride: int = 0,
                       blocksparse_block_size: int = 64, blocksparse_head_sliding_step: int = 0,
                       partition_size: int = 512) -> None:
    """paged_attention_v1 in partitions of partition_size tokens."""
def merge_attn_states(output: Array, prefix_output: Array, prefix_lse: Array,
                      suffix_output: Array, suffix_lse: Array, output_lse: OptArray = None,
                      prefill_tokens_with_context: Optional[int] = None,
                      output_scale: OptArray = None) -> None:
    """Merges two partial attention results by their LSEs (vLLM's Python order)."""
def convert_vertical_slash_indexes(block_count: Array, block_offset: Array,
                                   column_count: Array, column_index: Array, q_seqlens: Array,
                                   kv_seqlens: Array, vertical_indexes: Array,
                                   slash_indexes: Array, context_size: int, block_size_M: int,
                                   block_size_N: int, causal: bool = True) -> None:
    """MInference vertical/slash lists -> key blocks and extra columns."""
def convert_vertical_slash_indexes_mergehead(block_count: Array, block_offset: Array,
                                             column_count: Array, column_index: Array,
                                             q_seqlens: Array, kv_seqlens: Array,
                                             vertical_indexes: Array, slash_indexes: Array,
                                             vertical_indices_count: Array,
                                             slash_indices_count: Array, context_size: int,
                                             block_size_M: int, block_size_N: int,
                                             causal: bool = True) -> None:
    """The conversion with per-head valid counts."""
def top_k_per_row_prefill(logits: Array, rowStarts: Array, rowEnds: Array, indices: Array,
                          numRows: int, stride0: int, stride1: int, topK: int) -> None:
    """Indices of the topK largest f32 logits of each row range."""
def top_k_per_row_decode(logits: Array, next_n: int, seq_lens: Array, indices: Array,
                         numRows: int, stride0: int, stride1: int, topK: int) -> None:
    """Top-k per row with row ends from seq_lens."""

# ---- CPU attention
def cpu_attn_metadata_bytes() -> int:
    """Bytes of the int8 scheduler-metadata tensor."""
def cpu_attn_get_scheduler_metadata(num_reqs: int, num_heads: int, num_kv_heads: int,
                                    head_dim: int, seq_lens: Array, dtype: Any,
                                    query_start_loc: Array, causal: bool,
                                    sliding_window_size: int, isa: str,
                                    enable_kv_split: bool) -> Any:
    """Returns a new int8 metadata tensor (torch if seq_lens is torch, else NumPy)."""
def cpu_attn_get_scheduler_metadata_into(metadata: Array, num_reqs: int, num_heads: int,
                                         num_kv_heads: int, head_dim: int, seq_lens: Array,
                                         dtype: Any, query_start_loc: Array, causal: bool,
                                         sliding_window_size: int, isa: str,
                                         enable_kv_split: bool) -> None:
    """Writes the metadata into a caller-provided int8 tensor."""
def cpu_attn_reshape_and_cache(key: Array, value: Array, key_cache: Array, value_cache: Array,
                               slot_mapping: Array, isa: str, k_scale: float = 1.0,
                               v_scale: float = 1.0, kv_cache_dtype: str = "auto") -> None:
    """key/value [T, Hkv, D] -> ISA-arranged caches [NB, Hkv, BS, D] (fp8: uint8 codes of
    x / scale when kv_cache_dtype is fp8 / fp8_e4m3 / fp8_e5m2)."""
def cpu_attention_with_kv_cache(query: Array, key_cache: Array, value_cache: Array,
                                output: Array, query_start_loc: Array, seq_lens: Array,
                                scale: float, causal: bool, alibi_slopes: OptArray,
                                sliding_window: Tuple[int, int], block_table: Array,
                                softcap: float, scheduler_metadata: Array,
                                s_aux: OptArray = None, k_scale: float = 1.0,
                                v_scale: float = 1.0, kv_cache_dtype: str = "auto") -> None:
    """Varlen CPU attention; sliding_window = (left, right), -1 = unbounded; fp8 caches read
    k = code·k_scale, v = code·v_scale."""

# ---- oneDNN GEMM (vLLM's handler model; a handler is an int, free it with
# release_onednn_handler)
def create_onednn_mm(b: Array, primitive_cache_size: int = 128) -> int:
    """Packs b [K, N] (f32/f16/bf16, any strides; vLLM passes weight.t()) and returns the handler.

    ``primitive_cache_size`` (>= 1) bounds the oneDNN primitives kept for the (K, N, dtype)
    class. The handler owns a copy of the weight: ``b`` may be freed afterwards.
    """
def onednn_mm(c: Array, a: Array, bias: OptArray, handler: int) -> None:
    """c [M, N] = a [M, K] @ b + bias, fp32 accumulation and one rounding to b's dtype.

    ``a`` has b's dtype and a unit last stride (any row stride); ``c`` is contiguous;
    ``bias`` [N] of the same dtype or None.
    """
def create_onednn_scaled_mm(b: Array, b_scales: Array, output_type: Any,
                            dynamic_act_quant: bool, use_azp: bool,
                            primitive_cache_size: int = 128) -> int:
    """Packs an int8 b [K, N] (column-major: weight.t()) for onednn_scaled_mm.

    ``b_scales``: fp32, 1 element (per tensor) or N (per output channel). ``output_type``:
    "f32"/"f16"/"bf16" (kiln or torch names) or a NumPy dtype (float32, float16).
    ``dynamic_act_quant``: per-token activation scales; ``use_azp``: activation zero points.
    """
def onednn_scaled_mm(c: Array, a: Array, a_scales: Array, azp: OptArray, azp_adj: OptArray,
                     bias: OptArray, handler: int) -> None:
    """int8 a [M, K] (contiguous) times the handler's b, exact in int32, then in fp32:

    static:  c = rnd(s_a * s_b[n] * sum_k (a - azp) * b + bias[n])   (a_scales, azp: 1 element)
    dynamic: c = rnd(s_a[m] * s_b[n] * sum_k a * b - s_a[m] * azp[m] * azp_adj[n] + bias[n])
    (a_scales, azp [M] or [M, 1]; azp_adj [N] or [1, N], required with azp); c [M, N] of the
    handler's output_type, bias [N] of that dtype or None.
    """
def release_onednn_handler(handler: int) -> None:
    """Frees a handler (vLLM's release_dnnl_matmul_handler); using it afterwards is an error."""
