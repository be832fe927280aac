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
    covered = {CASES[n]().op for n in CASES}
    assert exposed - covered == set()
    assert len(exposed) >= 30
