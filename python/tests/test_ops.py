"""Every kiln.ops op on NumPy inputs against kiln's ref backend.

Each case builds NumPy arrays in the op's KernelArgs order (docs/ops.md), runs the op through
kiln.ops (vLLM's signature; the default backend, x86 where it serves the spec) on one copy and
through ``kiln.compile(spec, backend="ref").run(...)`` on another, and compares the outputs:
bit-exact for copies, quantisation and integer outputs, a small tolerance for float math.
"""

import math

import numpy as np
import pytest

import kiln

RNG_SEED = 1234


def rng():
    return np.random.default_rng(RNG_SEED)


def clone(a):
    """A copy with the same strides (so a transposed or sliced layout stays one)."""
    if a is None:
        return None
    if isinstance(a, kiln.Tensor):
        return kiln.Tensor(clone(a.owner), a.dtype)
    if isinstance(a, np.ndarray) and a.base is not None and not a.flags.c_contiguous:
        # A view into a larger buffer: copy the buffer, take the same view of the copy.
        base = a.base.copy()
        offset = a.__array_interface__["data"][0] - a.base.__array_interface__["data"][0]
        return np.ndarray(a.shape, a.dtype, buffer=base, offset=offset, strides=a.strides)
    b = np.empty_like(a, order="K")
    b[...] = a
    return b


def raw(a):
    return a.owner if isinstance(a, kiln.Tensor) else a


class Case:
    def __init__(self, op, spec, args, scalars, call, outputs, tol=None):
        self.op = op            # kiln.ops name
        self.spec = spec        # spec text run on the ref backend
        self.args = args        # KernelArgs order (None = absent)
        self.scalars = scalars  # KernelArgs scalars
        self.call = call        # call(args) -> runs kiln.ops.<op> on those arrays
        self.outputs = outputs  # indices into args
        self.tol = tol          # None: exact; else (rtol, atol)


def f32(r, *shape, scale=1.0):
    return (r.standard_normal(shape) * scale).astype(np.float32)


def i32(values):
    return np.asarray(values, dtype=np.int32)


def i64(values):
    return np.asarray(values, dtype=np.int64)


# ---- norm, rope, activations ------------------------------------------------------------------

def case_rms_norm():
    r = rng()
    args = [np.zeros((5, 64), np.float32), f32(r, 5, 64), f32(r, 64)]
    return Case("rms_norm", "rms_norm(dtype=f32,hidden=64,weight=true)", args, [1e-6],
                lambda a: kiln.ops.rms_norm(a[0], a[1], a[2], 1e-6), [0], (1e-5, 1e-5))


def case_fused_add_rms_norm():
    r = rng()
    args = [f32(r, 5, 64), f32(r, 5, 64), f32(r, 64)]
    return Case("fused_add_rms_norm", "fused_add_rms_norm(dtype=f32,hidden=64,weight=true)", args,
                [1e-6], lambda a: kiln.ops.fused_add_rms_norm(a[0], a[1], a[2], 1e-6), [0, 1],
                (1e-5, 1e-5))


def case_rotary_embedding():
    r = rng()
    pos = i64([0, 3, 7, 1, 31])
    inv = 1.0 / (10000 ** (np.arange(0, 16, 2) / 16))
    ang = np.arange(32)[:, None] * inv[None, :]
    cache = np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)
    args = [pos, f32(r, 5, 4 * 16), f32(r, 5, 2 * 16), cache]
    spec = ("rotary_embedding(dtype=f32,cache_dtype=f32,head_size=16,rot_dim=16,style=neox,"
            "heads_q=4,heads_kv=2,key=true)")
    return Case("rotary_embedding", spec, args, [],
                lambda a: kiln.ops.rotary_embedding(a[0], a[1], a[2], 16, a[3], True), [1, 2],
                (1e-5, 1e-5))


def activation_case(op, scalars, call):
    r = rng()
    args = [np.zeros((5, 32), np.float32), f32(r, 5, 64, scale=3.0)]
    return Case(op, f"{op}(dtype=f32,d=32)", args, scalars, call, [0], (1e-5, 1e-5))


def case_silu_and_mul():
    return activation_case("silu_and_mul", [], lambda a: kiln.ops.silu_and_mul(a[0], a[1]))


def case_mul_and_silu():
    return activation_case("mul_and_silu", [], lambda a: kiln.ops.mul_and_silu(a[0], a[1]))


def case_gelu_and_mul():
    return activation_case("gelu_and_mul", [], lambda a: kiln.ops.gelu_and_mul(a[0], a[1]))


def case_gelu_tanh_and_mul():
    return activation_case("gelu_tanh_and_mul", [],
                           lambda a: kiln.ops.gelu_tanh_and_mul(a[0], a[1]))


def case_fatrelu_and_mul():
    return activation_case("fatrelu_and_mul", [0.25],
                           lambda a: kiln.ops.fatrelu_and_mul(a[0], a[1], 0.25))


def case_swigluoai_and_mul():
    return activation_case("swigluoai_and_mul", [1.5, 6.0],
                           lambda a: kiln.ops.swigluoai_and_mul(a[0], a[1], alpha=1.5, limit=6.0))


# ---- cache family -----------------------------------------------------------------------------

def case_swap_blocks():
    r = rng()
    src = r.integers(0, 256, (4, 32), dtype=np.uint8)
    dst = r.integers(0, 256, (4, 32), dtype=np.uint8)
    args = [src, dst, i64([[0, 2], [3, 1]])]
    return Case("swap_blocks", "swap_blocks(block_bytes=32)", args, [],
                lambda a: kiln.ops.swap_blocks(a[0], a[1], 32, a[2]), [1])


def case_reshape_and_cache():
    r = rng()
    # f32: x = 16 / 4 = 4 elements per key chunk.
    args = [f32(r, 3, 2, 8), f32(r, 3, 2, 8), f32(r, 2, 2, 2, 4, 4), f32(r, 2, 2, 8, 4),
            i64([0, 5, -1]), np.ones(1, np.float32), np.ones(1, np.float32)]
    spec = "reshape_and_cache(dtype=f32,kv=auto,heads_kv=2,head_size=8,block_size=4)"
    return Case("reshape_and_cache", spec, args, [],
                lambda a: kiln.ops.reshape_and_cache(*a[:5], "auto", a[5], a[6]), [2, 3])


def case_reshape_and_cache_fp8():
    r = rng()
    # An fp8 cache as uint8 codes (as vLLM allocates it): x = 16.
    args = [f32(r, 3, 2, 16), f32(r, 3, 2, 16), np.zeros((2, 2, 1, 4, 16), np.uint8),
            np.zeros((2, 2, 16, 4), np.uint8), i64([7, 0, 2]), np.full(1, 0.05, np.float32),
            np.full(1, 0.1, np.float32)]
    spec = "reshape_and_cache(dtype=f32,kv=fp8_e4m3,heads_kv=2,head_size=16,block_size=4)"
    return Case("reshape_and_cache", spec, args, [],
                lambda a: kiln.ops.reshape_and_cache(*a[:5], "fp8", a[5], a[6]), [2, 3])


def flash_case(layout):
    r = rng()
    if layout == "nhd":
        kc = f32(r, 3, 4, 2, 8)
        vc = f32(r, 3, 4, 2, 8)
    else:  # HND storage [NB, H, BS, D] viewed as [NB, BS, H, D]
        kc = f32(r, 3, 2, 4, 8).transpose(0, 2, 1, 3)
        vc = f32(r, 3, 2, 4, 8).transpose(0, 2, 1, 3)
    args = [f32(r, 3, 2, 8), f32(r, 3, 2, 8), kc, vc, i64([1, -1, 9]), np.ones(1, np.float32),
            np.ones(1, np.float32)]
    spec = (f"reshape_and_cache_flash(dtype=f32,kv=auto,heads_kv=2,head_size=8,block_size=4,"
            f"layout={layout},per_head_scale=false)")
    return Case("reshape_and_cache_flash", spec, args, [],
                lambda a: kiln.ops.reshape_and_cache_flash(*a[:5], "auto", a[5], a[6]), [2, 3])


def case_reshape_and_cache_flash_nhd():
    return flash_case("nhd")


def case_reshape_and_cache_flash_hnd():
    return flash_case("hnd")


def case_concat_and_cache_mla():
    r = rng()
    args = [f32(r, 3, 16), f32(r, 3, 8), f32(r, 2, 4, 24), i64([6, 0, -1]),
            np.ones(1, np.float32)]
    spec = "concat_and_cache_mla(dtype=f32,kv=auto,kv_lora_rank=16,pe_dim=8,block_size=4)"
    return Case("concat_and_cache_mla", spec, args, [],
                lambda a: kiln.ops.concat_and_cache_mla(*a[:4], "auto", a[4]), [2])


def case_concat_and_cache_mla_rope_fused():
    r = rng()
    ang = np.arange(16)[:, None] * (1.0 / (10000 ** (np.arange(0, 8, 2) / 8)))[None, :]
    cache = np.concatenate([np.cos(ang), np.sin(ang)], axis=1).astype(np.float32)
    args = [i64([3, 0, 15]), f32(r, 3, 2, 8), f32(r, 3, 8), f32(r, 3, 16), cache, i64([2, -1, 5]),
            f32(r, 2, 4, 24), np.ones(1, np.float32)]
    spec = ("concat_and_cache_mla_rope_fused(dtype=f32,kv=auto,kv_lora_rank=16,rot_dim=8,"
            "heads_q=2,style=gptj,block_size=4)")
    return Case("concat_and_cache_mla_rope_fused", spec, args, [],
                lambda a: kiln.ops.concat_and_cache_mla_rope_fused(
                    a[0], a[1], a[2], a[3], a[4], False, a[5], a[6], "auto", a[7]),
                [1, 2, 6], (1e-6, 1e-6))


def case_convert_fp8_quantise():
    r = rng()
    args = [np.zeros(64, np.uint8), f32(r, 64, scale=50.0)]
    return Case("convert_fp8", "convert_fp8(dst=fp8_e4m3,src=f32)", args, [0.5],
                lambda a: kiln.ops.convert_fp8(a[0], a[1], 0.5, "fp8"), [0])


def case_convert_fp8_dequantise():
    r = rng()
    codes = r.integers(0, 0x7F, 64, dtype=np.uint8)  # finite e4m3 codes
    args = [np.zeros(64, np.float32), codes]
    return Case("convert_fp8", "convert_fp8(dst=f32,src=fp8_e4m3)", args, [0.25],
                lambda a: kiln.ops.convert_fp8(a[0], a[1], 0.25, "fp8_e4m3"), [0])


# Two requests over a [3 blocks x 4 slots] cache: request 0 has 5 tokens in blocks 2, 0;
# request 1 has 1 token in block 1.
TABLE = [[2, 0], [1, 0]]
CU = [0, 5, 6]


def case_gather_and_maybe_dequant_cache():
    r = rng()
    args = [f32(r, 3, 4, 8), np.zeros((6, 8), np.float32), i32(TABLE), i32(CU),
            i32([0, 0, 0, 0, 0, 1]), np.ones(1, np.float32), None]
    spec = "gather_and_maybe_dequant_cache(dtype=f32,kv=auto,head_dim=8,block_size=4)"
    return Case("gather_and_maybe_dequant_cache", spec, args, [6],
                lambda a: kiln.ops.gather_and_maybe_dequant_cache(
                    a[0], a[1], a[2], a[3], a[4], 6, "auto", a[5], a[6]), [1])


def case_cp_gather_cache():
    r = rng()
    args = [f32(r, 3, 4, 8), np.zeros((6, 8), np.float32), i32(TABLE), i32(CU), None]
    return Case("cp_gather_cache", "cp_gather_cache(dtype=f32,entry_size=8,block_size=4)", args,
                [2], lambda a: kiln.ops.cp_gather_cache(a[0], a[1], a[2], a[3], 2, a[4]), [1])


def case_cp_gather_and_upconvert_fp8_kv_cache():
    r = rng()
    cache = r.integers(0, 0x7F, (3, 4, 656), dtype=np.uint8)  # finite e4m3 codes
    cache[:, :, 512:528] = np.full((3, 4, 4), 0.5, np.float32).view(np.uint8)  # tile scales
    dst = kiln.Tensor(np.zeros((6, 576), np.uint16), "bf16")
    args = [cache, dst, i32(TABLE), i32([5, 1]), i32([0, 5])]
    return Case("cp_gather_and_upconvert_fp8_kv_cache",
                "cp_gather_and_upconvert_fp8_kv_cache(block_size=4)", args, [2],
                lambda a: kiln.ops.cp_gather_and_upconvert_fp8_kv_cache(*a, 2), [1])


def case_indexer_k_quant_and_cache():
    r = rng()
    k = kiln.Tensor(kiln.bf16_bits(f32(r, 3, 128)), "bf16")
    args = [k, np.zeros((2, 4, 132), np.uint8), i64([5, 0, -1])]
    spec = ("indexer_k_quant_and_cache(dtype=bf16,head_dim=128,quant_block=128,block_size=4,"
            "scale_fmt=ue8m0)")
    return Case("indexer_k_quant_and_cache", spec, args, [],
                lambda a: kiln.ops.indexer_k_quant_and_cache(a[0], a[1], a[2], 128, "ue8m0"), [1])


def case_cp_gather_indexer_k_quant_cache():
    r = rng()
    args = [r.integers(0, 256, (2, 4, 132), dtype=np.uint8), np.zeros((5, 128), np.uint8),
            np.zeros((5, 4), np.uint8), i32([[1, 0]]), i32([0, 5])]
    spec = "cp_gather_indexer_k_quant_cache(head_dim=128,quant_block=128,block_size=4)"
    return Case("cp_gather_indexer_k_quant_cache", spec, args, [],
                lambda a: kiln.ops.cp_gather_indexer_k_quant_cache(*a), [1, 2])


# ---- attention, sparse indices, top-k ---------------------------------------------------------

def paged_inputs(r):
    # f32 cache: x = 4; 4 blocks of 4 slots; 2 sequences of 5 and 3 tokens.
    return dict(query=f32(r, 2, 4, 8), key_cache=f32(r, 4, 2, 2, 4, 4),
                value_cache=f32(r, 4, 2, 8, 4), block_tables=i32([[0, 1], [2, 3]]),
                seq_lens=i32([5, 3]), scale=1 / math.sqrt(8))


def case_paged_attention_v1():
    p = paged_inputs(rng())
    one = np.ones(1, np.float32)
    args = [np.zeros((2, 4, 8), np.float32), p["query"], p["key_cache"], p["value_cache"],
            p["block_tables"], p["seq_lens"], None, one, one]
    spec = ("paged_attention_v1(dtype=f32,kv=auto,head_size=8,block_size=4,heads_q=4,heads_kv=2,"
            "alibi=false,blocksparse=false,partition_size=0)")
    return Case("paged_attention_v1", spec, args, [p["scale"], 5, 0, 0, 0, 64, 0],
                lambda a: kiln.ops.paged_attention_v1(a[0], a[1], a[2], a[3], 2, p["scale"],
                                                      a[4], a[5], 4, 5, a[6], "auto", a[7],
                                                      a[8]),
                [0], (1e-5, 1e-5))


def case_paged_attention_v2():
    p = paged_inputs(rng())
    one = np.ones(1, np.float32)
    args = [np.zeros((2, 4, 8), np.float32), np.zeros((2, 4, 2), np.float32),
            np.zeros((2, 4, 2), np.float32), np.zeros((2, 4, 2, 8), np.float32), p["query"],
            p["key_cache"], p["value_cache"], p["block_tables"], p["seq_lens"], None, one, one]
    spec = ("paged_attention_v2(dtype=f32,kv=auto,head_size=8,block_size=4,heads_q=4,heads_kv=2,"
            "alibi=false,blocksparse=false,partition_size=4)")
    return Case("paged_attention_v2", spec, args, [p["scale"], 5, 0, 0, 0, 64, 0],
                lambda a: kiln.ops.paged_attention_v2(*a[:7], 2, p["scale"], a[7], a[8], 4, 5,
                                                      a[9], "auto", a[10], a[11],
                                                      partition_size=4),
                [0, 1, 2, 3], (1e-5, 1e-5))


def case_paged_attention_v1_blocksparse():
    # Block-sparse (vLLM's Phi-3-small mode): sparse blocks of one cache block (4 tokens),
    # vertical stride 2, one local block, the pattern sliding per query head; 2 sequences of 13
    # and 9 tokens, so each query head skips some blocks and the two of a KV head differ.
    r = rng()
    one = np.ones(1, np.float32)
    args = [np.zeros((2, 4, 8), np.float32), f32(r, 2, 4, 8), f32(r, 7, 2, 2, 4, 4),
            f32(r, 7, 2, 8, 4), i32([[0, 1, 2, 3], [4, 5, 6, 0]]), i32([13, 9]), None, one, one]
    spec = ("paged_attention_v1(dtype=f32,kv=auto,head_size=8,block_size=4,heads_q=4,heads_kv=2,"
            "alibi=false,blocksparse=true,partition_size=0)")
    scale = 1 / math.sqrt(8)
    return Case("paged_attention_v1", spec, args, [scale, 13, 0, 1, 2, 4, 1],
                lambda a: kiln.ops.paged_attention_v1(
                    a[0], a[1], a[2], a[3], 2, scale, a[4], a[5], 4, 13, a[6], "auto", a[7],
                    a[8], tp_rank=0, blocksparse_local_blocks=1, blocksparse_vert_stride=2,
                    blocksparse_block_size=4, blocksparse_head_sliding_step=1),
                [0], (1e-5, 1e-5))


def case_merge_attn_states():
    r = rng()
    args = [np.zeros((3, 2, 8), np.float32), np.zeros((2, 3), np.float32), f32(r, 3, 2, 8),
            f32(r, 2, 3), f32(r, 3, 2, 8), f32(r, 2, 3), None]
    spec = "merge_attn_states(dtype=f32,out_dtype=f32,heads=2,head_size=8,output_lse=true)"
    return Case("merge_attn_states", spec, args, [-1],
                lambda a: kiln.ops.merge_attn_states(a[0], a[2], a[3], a[4], a[5],
                                                     output_lse=a[1]),
                [0, 1], (1e-6, 1e-6))


def vertical_slash_args(mergehead):
    # batch 2, 2 heads, block 4, context 14 (4 row blocks); 3 verticals, 2 slashes.
    rows = 4
    untouched = lambda *shape: np.full(shape, -7, np.int32)  # noqa: E731
    args = [untouched(2, 2, rows), untouched(2, 2, rows, 2), untouched(2, 2, rows),
            untouched(2, 2, rows, 3), i32([14, 9]), i32([16, 12]),
            i32([[[0, 5, 11], [1, 2, 3]], [[4, 6, 10], [0, 7, 8]]]),
            i32([[[6, 0], [3, 1]], [[9, 0], [2, 1]]])]
    if mergehead:
        args += [i32([3, 2]), i32([1, 2])]
    return args


def case_convert_vertical_slash_indexes():
    args = vertical_slash_args(False)
    return Case("convert_vertical_slash_indexes",
                "convert_vertical_slash_indexes(block_m=4,block_n=4,causal=true)", args, [14],
                lambda a: kiln.ops.convert_vertical_slash_indexes(*a, 14, 4, 4, True),
                [0, 1, 2, 3])


def case_convert_vertical_slash_indexes_mergehead():
    args = vertical_slash_args(True)
    return Case("convert_vertical_slash_indexes_mergehead",
                "convert_vertical_slash_indexes_mergehead(block_m=4,block_n=4,causal=true)", args,
                [14], lambda a: kiln.ops.convert_vertical_slash_indexes_mergehead(
                    *a, 14, 4, 4, True), [0, 1, 2, 3])


def case_top_k_per_row_prefill():
    r = rng()
    args = [f32(r, 3, 40), i32([0, 5, 0]), i32([40, 30, 3]), np.zeros((3, 8), np.int32)]
    return Case("top_k_per_row_prefill", "top_k_per_row_prefill(top_k=8)", args, [3, 40, 1],
                lambda a: kiln.ops.top_k_per_row_prefill(*a, 3, 40, 1, 8), [3])


def case_top_k_per_row_decode():
    r = rng()
    args = [f32(r, 4, 40), i32([30, 40]), np.zeros((4, 8), np.int32)]
    return Case("top_k_per_row_decode", "top_k_per_row_decode(top_k=8)", args, [2, 4, 40, 1],
                lambda a: kiln.ops.top_k_per_row_decode(a[0], 2, a[1], a[2], 4, 40, 1, 8), [2])


# ---- CPU attention ----------------------------------------------------------------------------

SEQ_LENS = [5, 7]
QSL = [0, 1, 3]  # request 0 decodes one token, request 1 prefills two


def case_cpu_attn_get_scheduler_metadata():
    md = np.zeros(kiln.ops.cpu_attn_metadata_bytes(), np.int8)
    args = [md, i32(SEQ_LENS), i32(QSL)]
    spec = ("cpu_attn_get_scheduler_metadata(isa=vec,dtype=f32,head_size=32,heads_q=4,heads_kv=2,"
            "causal=true)")

    def call(a):
        got = kiln.ops.cpu_attn_get_scheduler_metadata(2, 4, 2, 32, a[1], np.float32, a[2], True,
                                                       -1, "vec", True)
        a[0][...] = got  # the Python form returns a new tensor, as vLLM's
    return Case("cpu_attn_get_scheduler_metadata", spec, args, [2, -1, 1], call, [0])


def case_cpu_attn_reshape_and_cache():
    r = rng()
    args = [f32(r, 3, 2, 32), f32(r, 3, 2, 32), f32(r, 2, 2, 32, 32), f32(r, 2, 2, 32, 32),
            i64([33, -1, 2])]
    spec = "cpu_attn_reshape_and_cache(isa=vec,dtype=f32,heads_kv=2,head_size=32,block_size=32)"
    return Case("cpu_attn_reshape_and_cache", spec, args, [],
                lambda a: kiln.ops.cpu_attn_reshape_and_cache(*a, "vec"), [2, 3])


def case_cpu_attention_with_kv_cache():
    r = rng()
    md = kiln.ops.cpu_attn_get_scheduler_metadata(2, 4, 2, 32, i32(SEQ_LENS), "f32", i32(QSL),
                                                  True, -1, "vec", True)
    scale = 1 / math.sqrt(32)
    args = [f32(r, 3, 4, 32), f32(r, 2, 2, 32, 32), f32(r, 2, 2, 32, 32),
            np.zeros((3, 4, 32), np.float32), i32(QSL), i32(SEQ_LENS), None, i32([[0], [1]]), md,
            None]
    spec = ("cpu_attention_with_kv_cache(isa=vec,dtype=f32,head_size=32,block_size=32,heads_q=4,"
            "heads_kv=2,causal=true,sliding_window=false,alibi=false,softcap=false,sinks=false)")
    return Case("cpu_attention_with_kv_cache", spec, args, [scale, -1, -1, 0],
                lambda a: kiln.ops.cpu_attention_with_kv_cache(
                    a[0], a[1], a[2], a[3], a[4], a[5], scale, True, a[6], (-1, -1), a[7], 0.0,
                    a[8], a[9]),
                [3], (1e-5, 1e-5))


def fp8_e4m3_to_f64(codes):
    """OCP e4m3fn codes -> float64 (bias 7, subnormals m/8 * 2^-6, 0x7f/0xff NaN)."""
    c = codes.astype(np.int64)
    sign = np.where(c & 0x80, -1.0, 1.0)
    e = (c >> 3) & 0xF
    m = (c & 0x7).astype(np.float64)
    v = np.where(e == 0, m / 8.0 * 2.0 ** -6, (1.0 + m / 8.0) * 2.0 ** (e - 7))
    return np.where((c & 0x7F) == 0x7F, np.nan, sign * v)


@pytest.mark.parametrize("head", [40, 57])
def test_cpu_attention_fp8_kv_matches_ref_and_numpy(head):
    """vLLM's trailing fp8 arguments (k_scale, v_scale, kv_cache_dtype) of the cache write and
    the attention: the uint8 cache written by kiln.ops equals the ref's bit for bit, and the
    attention over it matches the ref backend and a float64 NumPy attention over the decoded
    codes (spec §3.6: k = code·k_scale, v = code·v_scale). Head sizes off vLLM's list."""
    r = rng()
    hq, hkv, bs, blocks = 4, 2, 32, 4
    seq_lens, qsl = [37, 50], [0, 1, 4]  # a decode and a 3-token prefill, partial last pages
    k_scale, v_scale = 0.5, 0.25
    tokens = sum(seq_lens)
    key, value = f32(r, tokens, hkv, head), f32(r, tokens, hkv, head)
    # Every token of both requests written through its block-table slot.
    table = i32([[2, 1], [0, 3]])
    slots = i64([table[q, j // bs] * bs + j % bs for q, n in enumerate(seq_lens)
                 for j in range(n)])
    kc = np.zeros((blocks, hkv, bs, head), np.uint8)
    vc = np.zeros_like(kc)
    kc_ref, vc_ref = kc.copy(), vc.copy()
    kiln.ops.cpu_attn_reshape_and_cache(key, value, kc, vc, slots, "vec", k_scale, v_scale,
                                        "fp8_e4m3")
    write = (f"cpu_attn_reshape_and_cache(isa=vec,dtype=f32,heads_kv={hkv},head_size={head},"
             f"block_size={bs},kv=fp8_e4m3)")
    kiln.compile(write, backend="ref").run([key, value, kc_ref, vc_ref, slots],
                                           [k_scale, v_scale])
    np.testing.assert_array_equal(kc, kc_ref)
    np.testing.assert_array_equal(vc, vc_ref)
    assert np.count_nonzero(kc) > 0

    query = f32(r, qsl[-1], hq, head)
    md = kiln.ops.cpu_attn_get_scheduler_metadata(2, hq, hkv, head, i32(seq_lens), "f32",
                                                  i32(qsl), True, -1, "vec", True)
    scale = 1 / math.sqrt(head)
    out = np.zeros((qsl[-1], hq, head), np.float32)
    kiln.ops.cpu_attention_with_kv_cache(query, kc, vc, out, i32(qsl), i32(seq_lens), scale,
                                         True, None, (-1, -1), table, 0.0, md, None,
                                         k_scale=k_scale, v_scale=v_scale,
                                         kv_cache_dtype="fp8_e4m3")
    spec = (f"cpu_attention_with_kv_cache(isa=vec,dtype=f32,head_size={head},block_size={bs},"
            f"heads_q={hq},heads_kv={hkv},causal=true,sliding_window=false,alibi=false,"
            "softcap=false,sinks=false,kv=fp8_e4m3)")
    want = np.zeros_like(out)
    kiln.compile(spec, backend="ref").run(
        [query, kc, vc, want, i32(qsl), i32(seq_lens), None, table, md, None],
        [scale, -1, -1, 0, k_scale, v_scale])
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)

    # NumPy: the vec slabs hold K transposed [D, bs] and V natural [bs, D] (spec §3.3).
    kd, vd = fp8_e4m3_to_f64(kc) * k_scale, fp8_e4m3_to_f64(vc) * v_scale
    for q in range(2):
        n, first = seq_lens[q], qsl[q]
        q_len = qsl[q + 1] - first
        for h in range(hq):
            g = h // (hq // hkv)
            keys = np.stack([kd[table[q, j // bs], g].reshape(head, bs)[:, j % bs]
                             for j in range(n)])
            vals = np.stack([vd[table[q, j // bs], g].reshape(bs, head)[j % bs]
                             for j in range(n)])
            for i in range(q_len):
                pos = n - q_len + i
                s = keys[:pos + 1] @ query[first + i, h].astype(np.float64) * scale
                p = np.exp(s - s.max())
                np.testing.assert_allclose(out[first + i, h], p @ vals[:pos + 1] / p.sum(),
                                           rtol=1e-4, atol=1e-5)


CASES = {name[len("case_"):]: fn for name, fn in sorted(globals().items())
         if name.startswith("case_")}

# kiln.ops names that are helpers, not ops.
HELPERS = {"cpu_attn_metadata_bytes", "cpu_attn_get_scheduler_metadata_into"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_op_matches_ref(name):
    case = CASES[name]()
    mine = [clone(a) for a in case.args]
    ref = [clone(a) for a in case.args]
    kiln.compile(case.spec, backend="ref").run(ref, case.scalars)
    case.call(mine)
    for i in case.outputs:
        got, want = raw(mine[i]), raw(ref[i])
        if case.tol is None:
            np.testing.assert_array_equal(got, want, err_msg=f"{case.op}: output {i}")
        else:
            rtol, atol = case.tol
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol,
                                       err_msg=f"{case.op}: output {i}")
    # The op wrote something: an output differs from its initial contents.
    assert any(not np.array_equal(raw(mine[i]), raw(case.args[i])) for i in case.outputs), \
        f"{case.op}: no output changed"


def test_every_exposed_op_has_a_case():
    exposed = {n for n in kiln.ops.__all__ if not n.startswith("_")} - HELPERS
    covered = {CASES[n]().op for n in CASES} | GEMM_OPS
    assert exposed - covered == set()
    assert len(exposed) >= 30


# ---- oneDNN GEMM ------------------------------------------------------------------------------
# Handler ops do not fit Case (the handler tensor lives inside kiln), so they are checked
# against NumPy references written from the spec (norm_act_cpu_ops.md §4): exact on
# small-integer inputs, and the scaled-mm formulas in float64 for int8.

GEMM_OPS = {"create_onednn_mm", "onednn_mm", "create_onednn_scaled_mm", "onednn_scaled_mm",
            "release_onednn_handler"}


def ptr(a):
    return raw(a).__array_interface__["data"][0]


def small_ints(r, shape, lo=-4, hi=4):
    return r.integers(lo, hi + 1, shape).astype(np.float32)


@pytest.fixture
def handlers():
    """Handlers a test creates; those it did not release itself are released afterwards."""
    made = []
    yield made
    for h in made:
        try:
            kiln.ops.release_onednn_handler(h)
        except ValueError:
            pass  # the test released it


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_onednn_mm_matches_numpy_exactly(dtype, handlers):
    # Small integers: every product and partial sum is exact in fp32 (and, at these sizes, in
    # f16: |sum| <= 33 * 16 + 4 < 2048), so any summation order gives numpy's result.
    np_dtype = np.float32 if dtype == "f32" else np.float16
    r = rng()
    m, k, n = 5, 33, 17
    w = small_ints(r, (n, k))  # the layer's weight [N, K]
    a = small_ints(r, (m, k))
    bias = small_ints(r, n)
    b = w.astype(np_dtype).T  # vLLM passes weight.t(): [K, N] with strides (1, K)
    assert not b.flags.c_contiguous
    h = kiln.ops.create_onednn_mm(b, 4)
    handlers.append(h)
    assert isinstance(h, int)
    b[...] = 0  # the handler owns its copy of the weight
    c = np.full((m, n), -99, np_dtype)
    before = ptr(c)
    kiln.ops.onednn_mm(c, a.astype(np_dtype), bias.astype(np_dtype), h)
    assert ptr(c) == before  # written in place
    np.testing.assert_array_equal(c.astype(np.float32), a @ w.T + bias)
    # Same handler, no bias, another M, and a row stride (a [:, :k] view of [M, 2K]).
    wide = small_ints(r, (3, 2 * k)).astype(np_dtype)
    c2 = np.full((3, n), -99, np_dtype)
    kiln.ops.onednn_mm(c2, wide[:, :k], None, h)
    np.testing.assert_array_equal(c2.astype(np.float32),
                                  wide[:, :k].astype(np.float32) @ w.T)


def test_onednn_mm_bf16_through_uint16_views(handlers):
    # bf16 holds integers up to 256 exactly: |sum| <= 24 * 4 + 2 with values in [-2, 2].
    r = rng()
    m, k, n = 7, 24, 9
    w = small_ints(r, (n, k), -2, 2)
    a = small_ints(r, (m, k), -2, 2)
    bias = small_ints(r, n, -2, 2)
    b = kiln.Tensor(kiln.bf16_bits(w).T, "bf16")
    h = kiln.ops.create_onednn_mm(b, primitive_cache_size=2)
    handlers.append(h)
    c_bits = np.zeros((m, n), np.uint16)
    c = kiln.Tensor(c_bits, "bf16")
    kiln.ops.onednn_mm(c, kiln.Tensor(kiln.bf16_bits(a), "bf16"),
                       kiln.Tensor(kiln.bf16_bits(bias), "bf16"), h)
    assert c.data_ptr == ptr(c_bits)
    np.testing.assert_array_equal(kiln.from_bf16_bits(c_bits), a @ w.T + bias)
    # vLLM's M sequence on one handler with a primitive cache of 2 (evictions, re-use).
    for rows in (1, 17, 1, 31, 17):
        x = small_ints(r, (rows, k), -2, 2)
        out = np.zeros((rows, n), np.uint16)
        kiln.ops.onednn_mm(kiln.Tensor(out, "bf16"), kiln.Tensor(kiln.bf16_bits(x), "bf16"),
                           None, h)
        np.testing.assert_array_equal(kiln.from_bf16_bits(out), x @ w.T, err_msg=f"M={rows}")


def scaled_mm_reference(a, w, s_a, s_b, zp, bias, dynamic):
    """The spec's formulas in float64 (w is the int8 weight [N, K]) and the magnitude of their
    largest term, the scale of the fp32 epilogue's rounding error."""
    acc = a.astype(np.int64) @ w.T.astype(np.int64)  # exact sum_k a*b
    s_b = np.broadcast_to(np.asarray(s_b, np.float64).reshape(1, -1), acc.shape)
    s_a = np.asarray(s_a, np.float64).reshape(-1, 1)
    bias = np.zeros(acc.shape[1]) if bias is None else bias.astype(np.float64)
    colsum = w.astype(np.int64).sum(axis=1)  # sum_k b[k, n]
    zp = np.zeros((1, 1)) if zp is None else zp.reshape(-1, 1).astype(np.float64)
    if not dynamic:
        # c = s_a * s_b[n] * sum_k (a - zp) * b + bias[n]
        zp_term = s_a * s_b * zp * colsum[None, :]
        main = s_a * s_b * acc
    else:
        # c = s_a[m] * (s_b[n] * sum_k a*b) - s_a[m] * zp[m] * azp_adj[n] + bias[n]
        azp_adj = s_b[0] * colsum
        zp_term = (s_a * zp) * azp_adj[None, :]
        main = s_a * (s_b * acc)
    largest = np.abs(main).max() + np.abs(zp_term).max() + np.abs(bias).max()
    return main - zp_term + bias[None, :], largest


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("use_azp", [False, True], ids=["sym", "azp"])
@pytest.mark.parametrize("out", ["f32", "bf16"])
def test_onednn_scaled_mm_matches_spec(dynamic, per_channel, use_azp, out, handlers):
    r = rng()
    m, k, n = 6, 40, 13
    w = np.clip(np.rint(r.standard_normal((n, k)) * 5), -128, 127).astype(np.int8)
    a = np.clip(np.rint(r.standard_normal((m, k)) * 5), -128, 127).astype(np.int8)
    s_b = (r.random(n if per_channel else 1) * 0.1 + 0.01).astype(np.float32)
    if dynamic:
        s_a = (r.standard_normal((m, 1)) * 0.05).astype(np.float32)  # may be negative
        zp = r.integers(-20, 20, (m, 1)).astype(np.int32) if use_azp else None
    else:
        s_a = np.array([0.037], np.float32)
        zp = np.array([7], np.int32) if use_azp else None
    bias_f = (r.random(n) * 10).astype(np.float32)
    # output_type as a kiln name, or as a NumPy dtype where NumPy has one.
    output_type = np.float32 if out == "f32" else "bf16"
    h = kiln.ops.create_onednn_scaled_mm(w.T, s_b, output_type, dynamic, use_azp, 2)
    handlers.append(h)
    # The dynamic epilogue needs azp_adj = s_b * colsum(b); the static path folds the zero point
    # into the integer product, and vLLM layers may still pass azp_adj (ignored, second call).
    azp_adj = None
    if use_azp:
        azp_adj = (s_b.astype(np.float32) * w.astype(np.float32).sum(axis=1)).astype(np.float32)

    def run(bias_f, azp_adj):
        if out == "f32":
            c_raw = np.full((m, n), np.nan, np.float32)
            c, bias = c_raw, bias_f
        else:
            c_raw = np.zeros((m, n), np.uint16)
            c = kiln.Tensor(c_raw, "bf16")
            bias = None if bias_f is None else kiln.Tensor(kiln.bf16_bits(bias_f), "bf16")
            bias_f = None if bias_f is None else kiln.from_bf16_bits(kiln.bf16_bits(bias_f))
        before = ptr(c_raw)
        kiln.ops.onednn_scaled_mm(c, a, s_a, zp, azp_adj, bias, h)
        assert ptr(c_raw) == before
        got = c_raw if out == "f32" else kiln.from_bf16_bits(c_raw)
        want, largest = scaled_mm_reference(a, w, s_a, s_b, zp, bias_f, dynamic)
        # kiln's epilogue is fp32 (one rounding into c): atol relative to the largest term.
        rtol = 1e-5 if out == "f32" else 2.0 ** -7
        np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-5 * largest)

    run(bias_f, azp_adj if dynamic else None)
    run(None, azp_adj)  # bias may differ from call to call on one handler


def test_onednn_scaled_mm_output_type_names(handlers):
    r = rng()
    w = r.integers(-5, 6, (8, 16)).astype(np.int8)
    a = r.integers(-5, 6, (3, 16)).astype(np.int8)
    s_b = np.array([0.5], np.float32)
    s_a = np.array([0.25], np.float32)
    want = (a.astype(np.int64) @ w.T.astype(np.int64)) * 0.125  # exact in f16
    for output_type in ("f16", "float16", np.float16, np.dtype("float16")):
        h = kiln.ops.create_onednn_scaled_mm(w.T, s_b, output_type, False, False)
        handlers.append(h)
        c = np.zeros((3, 8), np.float16)
        kiln.ops.onednn_scaled_mm(c, a, s_a, None, None, None, h)
        np.testing.assert_array_equal(c.astype(np.float64), want, err_msg=str(output_type))


# ---- oneDNN GEMM: bad input -------------------------------------------------------------------

@pytest.fixture
def mm_setup(handlers):
    r = rng()
    w = small_ints(r, (6, 8))
    h = kiln.ops.create_onednn_mm(w.T)
    handlers.append(h)
    return h, small_ints(r, (3, 8)), np.full((3, 6), -5, np.float32)


def expect_untouched(c):
    assert np.all(c == -5), "nothing is written when an argument is rejected"


@pytest.mark.parametrize("bad, exc, arg", [
    ("a_k", ValueError, "'a'"),
    ("c_n", ValueError, "'c'"),
    ("m_mismatch", ValueError, "'a'"),  # a's rows must match c's
    ("bias_len", ValueError, "'bias'"),
    ("a_dtype", TypeError, "'a'"),
    ("bias_dtype", TypeError, "'bias'"),
    ("a_not_array", TypeError, "'a'"),
    ("a_col_stride", ValueError, "'a'"),  # a needs a unit last stride
    ("c_strided", ValueError, "'c'"),     # c must be contiguous
])
def test_onednn_mm_rejects_bad_input(mm_setup, bad, exc, arg):
    h, a, c = mm_setup
    bias = np.zeros(6, np.float32)
    if bad == "a_k":
        a = np.zeros((3, 9), np.float32)
    elif bad == "c_n":
        c = np.full((3, 7), -5, np.float32)
    elif bad == "m_mismatch":
        c = np.full((4, 6), -5, np.float32)
    elif bad == "bias_len":
        bias = np.zeros(5, np.float32)
    elif bad == "a_dtype":
        a = a.astype(np.float16)
    elif bad == "bias_dtype":
        bias = bias.astype(np.float64)
    elif bad == "a_not_array":
        a = a.tolist()
    elif bad == "a_col_stride":
        a = np.zeros((3, 16), np.float32)[:, ::2]
    elif bad == "c_strided":
        c = np.full((3, 12), -5, np.float32)[:, ::2]
    with pytest.raises(exc, match=arg):
        kiln.ops.onednn_mm(c, a, bias, h)
    expect_untouched(c)


def test_onednn_handlers_unknown_released_and_foreign(handlers):
    r = rng()
    w = small_ints(r, (6, 8))
    a = small_ints(r, (3, 8))
    c = np.full((3, 6), -5, np.float32)
    with pytest.raises(ValueError, match="'handler'"):
        kiln.ops.onednn_mm(c, a, None, 12345)
    h = kiln.ops.create_onednn_mm(w.T)
    kiln.ops.onednn_mm(c, a, None, h)
    np.testing.assert_array_equal(c, a @ w.T)
    kiln.ops.release_onednn_handler(h)
    c[...] = -5
    with pytest.raises(ValueError, match="'handler'"):
        kiln.ops.onednn_mm(c, a, None, h)
    expect_untouched(c)
    with pytest.raises(ValueError, match="'handler'"):
        kiln.ops.release_onednn_handler(h)  # twice
    # An mm handler is not a scaled-mm handler.
    h2 = kiln.ops.create_onednn_mm(w.T)
    handlers.append(h2)
    with pytest.raises(ValueError, match="'handler'"):
        kiln.ops.onednn_scaled_mm(c, a.astype(np.int8), np.ones(1, np.float32), None, None,
                                  None, h2)
    expect_untouched(c)


def test_create_onednn_mm_rejects_bad_input():
    with pytest.raises(TypeError, match="'b'"):
        kiln.ops.create_onednn_mm(np.zeros((8, 6), np.int32))
    with pytest.raises(ValueError, match="'b'"):
        kiln.ops.create_onednn_mm(np.zeros(8, np.float32))
    with pytest.raises(ValueError, match="primitive_cache_size"):
        kiln.ops.create_onednn_mm(np.zeros((8, 6), np.float32), 0)


def test_create_onednn_scaled_mm_rejects_bad_input():
    w = np.zeros((6, 8), np.int8)  # [N, K]; w.T is vLLM's column-major [K, N]
    s = np.ones(1, np.float32)
    with pytest.raises(ValueError, match="'b_scales'"):
        kiln.ops.create_onednn_scaled_mm(w.T, np.ones(5, np.float32), "f32", True, False)
    with pytest.raises(TypeError, match="'b_scales'"):
        kiln.ops.create_onednn_scaled_mm(w.T, np.ones(6, np.float64), "f32", True, False)
    with pytest.raises(TypeError, match="'b'"):
        kiln.ops.create_onednn_scaled_mm(w.T.astype(np.float32), s, "f32", True, False)
    with pytest.raises(ValueError, match="'b'"):
        kiln.ops.create_onednn_scaled_mm(np.ascontiguousarray(w.T), s, "f32", True, False)
    with pytest.raises(TypeError, match="'output_type'"):
        kiln.ops.create_onednn_scaled_mm(w.T, s, "f99", True, False)
    with pytest.raises(ValueError, match="'output_type'"):
        kiln.ops.create_onednn_scaled_mm(w.T, s, "i32", True, False)


@pytest.mark.parametrize("bad, exc, arg", [
    ("a_scales_len", ValueError, "'a_scales'"),
    ("a_scales_dtype", TypeError, "'a_scales'"),
    ("azp_len", ValueError, "'azp'"),
    ("azp_missing_adj", ValueError, "'azp_adj'"),
    ("azp_adj_len", ValueError, "'azp_adj'"),
    ("a_dtype", TypeError, "'a'"),
    ("c_dtype", TypeError, "'c'"),
    ("bias_len", ValueError, "'bias'"),
])
def test_onednn_scaled_mm_rejects_bad_input(bad, exc, arg, handlers):
    w = np.ones((6, 8), np.int8)
    h = kiln.ops.create_onednn_scaled_mm(w.T, np.ones(6, np.float32), "f32", True, True)
    handlers.append(h)
    a = np.ones((3, 8), np.int8)
    c = np.full((3, 6), -5, np.float32)
    a_scales, azp = np.ones((3, 1), np.float32), np.zeros((3, 1), np.int32)
    azp_adj, bias = np.full(6, 8, np.float32), np.zeros(6, np.float32)
    if bad == "a_scales_len":
        a_scales = np.ones(2, np.float32)
    elif bad == "a_scales_dtype":
        a_scales = a_scales.astype(np.float64)
    elif bad == "azp_len":
        azp = np.zeros(4, np.int32)
    elif bad == "azp_missing_adj":
        azp_adj = None
    elif bad == "azp_adj_len":
        azp_adj = np.ones(7, np.float32)
    elif bad == "a_dtype":
        a = a.astype(np.uint8)
    elif bad == "c_dtype":
        c = np.full((3, 6), -5, np.float16)
    elif bad == "bias_len":
        bias = np.zeros(7, np.float32)
    with pytest.raises(exc, match=arg):
        kiln.ops.onednn_scaled_mm(c, a, a_scales, azp, azp_adj, bias, h)
    expect_untouched(c)
    # The same call with good arguments passes (the fixture is valid).
    c = np.zeros((3, 6), np.float32)
    kiln.ops.onednn_scaled_mm(c, np.ones((3, 8), np.int8), np.ones((3, 1), np.float32),
                              np.zeros((3, 1), np.int32), np.full(6, 8, np.float32),
                              np.zeros(6, np.float32), h)
    np.testing.assert_array_equal(c, np.full((3, 6), 8, np.float32))


def test_onednn_mm_one_handler_from_several_threads(handlers):
    # The ops run without the GIL and a handler may be shared between threads (runtime/ops.h).
    from concurrent.futures import ThreadPoolExecutor

    r = rng()
    k, n = 32, 24
    w = small_ints(r, (n, k))
    h = kiln.ops.create_onednn_mm(w.T, 2)
    handlers.append(h)
    inputs = [small_ints(r, (rows, k)) for rows in (1, 5, 16, 33, 2, 7, 64, 3)]

    def work(a):
        c = np.zeros((a.shape[0], n), np.float32)
        for _ in range(5):
            kiln.ops.onednn_mm(c, a, None, h)
        return c

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(work, inputs))
    for a, c in zip(inputs, results):
        np.testing.assert_array_equal(c, a @ w.T, err_msg=f"M={a.shape[0]}")
