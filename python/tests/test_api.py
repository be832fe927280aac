"""kiln's Python surface: zero-copy DLPack in both directions, errors that name the argument,
strided and wrong-dtype arrays, bf16/fp8 through integer views, compile/prewarm/cache_info,
the optional torch registration, and the README's example."""

import contextlib
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import kiln

REPO = pathlib.Path(__file__).resolve().parents[2]


def ptr(a):
    return a.__array_interface__["data"][0]


def rms_args(n=4, h=64, dtype=np.float32):
    r = np.random.default_rng(5)
    return (np.zeros((n, h), dtype), r.standard_normal((n, h)).astype(dtype),
            r.standard_normal(h).astype(dtype))


# ---- zero copy --------------------------------------------------------------------------------

def test_kiln_sees_the_arrays_own_memory():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    assert kiln.Tensor(a).data_ptr == ptr(a)
    view = a[1:, 2:]  # a strided view: same buffer, offset pointer, no copy
    t = kiln.Tensor(view)
    assert t.data_ptr == ptr(view)
    assert t.shape == [3, 4] and t.strides == [6, 1]


def test_ops_write_in_place_into_the_callers_array():
    out, x, w = rms_args()
    before = ptr(out)
    kiln.ops.rms_norm(out, x, w, 1e-6)
    assert ptr(out) == before
    assert np.abs(out).sum() > 0
    want = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)


def test_strided_input_rows_are_read_in_place():
    # rms_norm accepts input rows with a stride (docs/ops.md): a column slice is not copied.
    out, x, w = rms_args()
    wide = np.zeros((4, 128), np.float32)
    wide[:, :64] = x
    kiln.ops.rms_norm(out, wide[:, :64], w, 1e-6)
    expected = np.zeros_like(out)
    kiln.ops.rms_norm(expected, x, w, 1e-6)
    np.testing.assert_array_equal(out, expected)


def test_dlpack_export_shares_memory():
    codes = np.arange(8, dtype=np.uint8)
    back = np.from_dlpack(kiln.Tensor(codes, "fp8_e4m3"))  # fp8 leaves as its bytes
    assert back.dtype == np.uint8 and ptr(back) == ptr(codes)
    codes[0] = 42  # NumPy marks DLPack imports read-only; the memory is the same
    assert back[0] == 42
    bits = kiln.bf16_bits(np.array([1.0, -2.5], np.float32))
    t = kiln.Tensor(bits, "bf16")
    assert t.dtype == "bf16" and t.data_ptr == ptr(bits)
    # NumPy cannot hold bf16: importing kiln's bf16 export is NumPy's error, not a copy.
    with pytest.raises((BufferError, TypeError, RuntimeError)):
        np.from_dlpack(t)


# ---- bf16 / fp8 through integer views ---------------------------------------------------------

def test_bf16_bits_round_trip_and_rounding():
    x = np.array([1.0, 1.00390625, 1.01171875, -3.0e38, np.inf, 0.0], np.float32)
    b = kiln.bf16_bits(x)
    assert b.dtype == np.uint16
    # 1 + 2^-8 is a tie between 1 and 1 + 2^-7: round to even (1.0); 1 + 3*2^-8 rounds up.
    np.testing.assert_array_equal(kiln.from_bf16_bits(b)[:3], [1.0, 1.0, 1.015625])
    assert np.isinf(kiln.from_bf16_bits(b)[4])
    assert np.isnan(kiln.from_bf16_bits(kiln.bf16_bits(np.array([np.nan], np.float32))))[0]


def test_bf16_op_on_uint16_views_matches_ref():
    out, x, w = rms_args()
    xb, wb = kiln.bf16_bits(x), kiln.bf16_bits(w)
    got = np.zeros_like(xb)
    want = np.zeros_like(xb)
    kiln.ops.rms_norm(kiln.Tensor(got, "bf16"), kiln.Tensor(xb, "bf16"), kiln.Tensor(wb, "bf16"),
                      1e-6)
    kiln.compile("rms_norm(dtype=bf16,hidden=64)", backend="ref").run(
        [kiln.Tensor(want, "bf16"), kiln.Tensor(xb, "bf16"), kiln.Tensor(wb, "bf16")], [1e-6])
    # bf16 keeps 8 significant bits: one ulp is 2^-7 relative.
    np.testing.assert_allclose(kiln.from_bf16_bits(got), kiln.from_bf16_bits(want), rtol=2 ** -7,
                               atol=1e-2)
    assert np.abs(kiln.from_bf16_bits(got)).sum() > 0


def test_raw_uint16_is_not_taken_for_bf16():
    out, x, w = rms_args()
    with pytest.raises(TypeError, match="argument 'input'"):
        kiln.ops.rms_norm(out, kiln.bf16_bits(x), w, 1e-6)


def test_a_dtype_view_must_keep_the_element_width():
    with pytest.raises(TypeError, match="cannot view 4-byte elements as bf16"):
        kiln.Tensor(np.zeros(4, np.float32), "bf16")
    with pytest.raises(TypeError, match="not a kiln dtype"):
        kiln.Tensor(np.zeros(4, np.uint16), "bfloat17")


# ---- bad inputs -------------------------------------------------------------------------------

def test_wrong_dtype_is_a_type_error_naming_the_argument():
    out, x, w = rms_args()
    with pytest.raises(TypeError, match=r"rms_norm: argument 'input' has dtype i32") as e:
        kiln.ops.rms_norm(out, x.astype(np.int32), w, 1e-6)
    assert isinstance(e.value, kiln.DTypeError) and isinstance(e.value, ValueError)
    with pytest.raises(TypeError, match="argument 'weight'"):
        kiln.ops.rms_norm(out, x, w.astype(np.float64), 1e-6)  # f64 has no kiln dtype


def test_non_array_is_a_type_error_naming_the_argument():
    out, x, w = rms_args()
    with pytest.raises(TypeError, match="argument 'input' must support DLPack"):
        kiln.ops.rms_norm(out, x.tolist(), w, 1e-6)


def test_non_contiguous_output_is_rejected_and_left_untouched():
    out, x, w = rms_args()
    wide = np.full((4, 128), 3.0, np.float32)
    with pytest.raises(ValueError, match="argument 'out'") as e:
        kiln.ops.rms_norm(wide[:, ::2], x, w, 1e-6)
    assert isinstance(e.value, kiln.InvalidArgumentError)
    assert (wide == 3.0).all()


def test_bad_string_argument_is_named_with_the_allowed_values():
    r = np.random.default_rng(1)
    key = r.standard_normal((2, 2, 8)).astype(np.float32)
    cache = np.zeros((3, 4, 2, 8), np.float32)
    one = np.ones(1, np.float32)
    with pytest.raises(ValueError, match=r"'kv_cache_dtype' = \"fp9\".*fp8_e4m3"):
        kiln.ops.reshape_and_cache_flash(key, key, cache, cache, np.array([0, 1]), "fp9", one, one)
    assert not cache.any()


def test_out_of_range_index_is_named_and_nothing_is_written():
    r = np.random.default_rng(1)
    key = r.standard_normal((2, 2, 8)).astype(np.float32)
    cache = np.zeros((3, 4, 2, 8), np.float32)
    one = np.ones(1, np.float32)
    with pytest.raises(ValueError, match="slot_mapping"):
        kiln.ops.reshape_and_cache_flash(key, key, cache, cache, np.array([0, 12]), "auto", one,
                                         one)
    assert not cache.any()


def test_wrong_index_dtype_is_a_type_error():
    r = np.random.default_rng(1)
    key = r.standard_normal((2, 2, 8)).astype(np.float32)
    cache = np.zeros((3, 4, 2, 8), np.float32)
    one = np.ones(1, np.float32)
    with pytest.raises(TypeError, match="slot_mapping"):
        kiln.ops.reshape_and_cache_flash(key, key, cache, cache, np.array([0, 1], np.int32),
                                         "auto", one, one)


def test_read_only_array_is_refused_with_the_argument_named():
    out, x, w = rms_args()
    x.flags.writeable = False
    with pytest.raises(ValueError, match="argument 'input' cannot be shared through DLPack"):
        kiln.ops.rms_norm(out, x, w, 1e-6)


def test_python_scalar_types_are_checked():
    out, x, w = rms_args()
    with pytest.raises(TypeError):
        kiln.ops.rms_norm(out, x, w, "1e-6")


# ---- compile / prewarm / cache_info -----------------------------------------------------------

def test_compile_forces_the_ref_backend_and_memoises():
    k = kiln.compile("silu_and_mul(dtype=f32,d=8)", backend="ref")
    assert k.backend == "ref" and k.spec == "silu_and_mul(dtype=f32,d=8)"
    before = kiln.cache_info()
    again = kiln.compile("silu_and_mul(d=8, dtype=float32)", backend="ref")  # same canonical spec
    after = kiln.cache_info()
    assert again.spec == k.spec
    assert after["memory_hits"] == before["memory_hits"] + 1
    assert after["generated"] == before["generated"]


def test_compile_errors_name_the_field():
    with pytest.raises(ValueError, match="hidden"):
        kiln.compile("rms_norm(dtype=f32,hidden=0)")
    with pytest.raises(ValueError, match="backend"):
        kiln.compile("rms_norm(dtype=f32,hidden=8)", backend="gpu")
    # An unknown ISA level names the argument and every level.
    with pytest.raises(ValueError, match="'isa'.*avx512_vbmi, avx512_fp16, amx"):
        kiln.compile("rms_norm(dtype=f32,hidden=8)", isa="avx9")
    with pytest.raises(ValueError, match="'isa'"):
        kiln.compile("rms_norm(dtype=f32,hidden=8)", isa="none")


def test_kernel_run_checks_its_arguments():
    k = kiln.compile("silu_and_mul(dtype=f32,d=8)", backend="ref")
    out = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match="input"):
        k.run([out, np.zeros((2, 10), np.float32)])


def test_prewarm_compiles_a_manifest(tmp_path):
    manifest = tmp_path / "specs.txt"
    manifest.write_text("# two specs\nsilu_and_mul(dtype=f32,d=24)\nrms_norm(dtype=f32,hidden=24)\n")
    # prewarm seals the runtime; run it in a child so this process keeps compiling freely.
    code = ("import kiln, sys; r = kiln.prewarm(sys.argv[1]); "
            "assert r['specs'] == 2 and r['kernels'] >= 2, r; print(r)")
    env = dict(os.environ, KILN_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-c", code, str(manifest)], env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    bad = tmp_path / "bad.txt"
    bad.write_text("rms_norm(dtype=f99,hidden=8)\n")
    with pytest.raises(ValueError, match="f99"):
        kiln.prewarm(str(bad))


def test_cache_info_reports_counters():
    info = kiln.cache_info()
    for key in ("memory_hits", "disk_hits", "generated", "errors", "cache_dir"):
        assert key in info
    assert info["generated"] + info["disk_hits"] >= 1


# ---- stubs, torch, README ---------------------------------------------------------------------

def test_stubs_list_every_op():
    stub = (pathlib.Path(kiln.__file__).parent / "ops.pyi").read_text()
    for name in kiln.ops.__all__:
        assert re.search(rf"^def {name}\(", stub, re.M), f"ops.pyi lacks {name}"
    assert kiln.ops.rms_norm.__doc__


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not installed for this interpreter (optional)")
def test_torch_tensors_and_registration():
    import torch

    x = torch.randn(3, 32, dtype=torch.bfloat16)
    out = torch.empty(3, 16, dtype=torch.bfloat16)
    kiln.ops.silu_and_mul(out, x)
    want = torch.nn.functional.silu(x[:, :16].float()) * x[:, 16:].float()
    torch.testing.assert_close(out.float(), want, rtol=2e-2, atol=2e-2)
    import kiln.torch as kt

    kt.register()
    out2 = torch.empty_like(out)
    torch.ops.kiln.silu_and_mul(out2, x)
    assert torch.equal(out, out2)


needs_torch = pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                                 reason="torch is not installed for this interpreter (optional)")


@needs_torch
def test_torch_zero_copy_both_directions():
    import torch

    t = torch.zeros(4, 8, dtype=torch.bfloat16)
    assert kiln.Tensor(t).data_ptr == t.data_ptr() and kiln.Tensor(t).dtype == "bf16"
    bits = kiln.bf16_bits(np.array([1.5, -2.0], np.float32))
    back = torch.from_dlpack(kiln.Tensor(bits, "bf16"))
    assert back.dtype == torch.bfloat16 and back.data_ptr() == ptr(bits)
    assert back.tolist() == [1.5, -2.0]


class ViaDlpack:
    """A torch tensor seen only through __dlpack__ (kiln's route for any other producer)."""

    def __init__(self, t):
        self.t = t

    def __dlpack__(self, stream=None):
        return self.t.__dlpack__()

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()


@needs_torch
def test_torch_cpu_tensors_read_directly_give_the_dlpack_view():
    # Plain CPU torch tensors skip torch's __dlpack__ wrapper (~3 µs each); the view must be
    # the one DLPack gives: pointer (storage offset included), shape, strides, dtype.
    import torch

    base = torch.randn(6, 40)
    views = [base, base[1:, 3:35], base.t(), base[::2, ::3], base.to(torch.bfloat16)[2:],
             base.to(torch.float16).view(3, 2, 40), torch.arange(12).view(3, 4)[:, 1:],
             torch.zeros(0, 8), torch.tensor(3, dtype=torch.int32), base.to(torch.int8)]
    for t in views:
        fast, slow = kiln.Tensor(t), kiln.Tensor(ViaDlpack(t))
        got = (fast.data_ptr, fast.shape, fast.strides, fast.dtype)
        assert got == (slow.data_ptr, slow.shape, slow.strides, slow.dtype), t.shape
        assert fast.data_ptr == t.data_ptr() and fast.strides == list(t.stride())
    # An op on a strided torch input writes what it writes through DLPack.
    x, w = base[1:, 3:35], torch.randn(32)
    out_fast, out_slow = torch.zeros(5, 32), torch.zeros(5, 32)
    kiln.ops.rms_norm(out_fast, x, w, 1e-6)
    kiln.ops.rms_norm(ViaDlpack(out_slow), ViaDlpack(x), ViaDlpack(w), 1e-6)
    assert torch.equal(out_fast, out_slow)
    want = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
    torch.testing.assert_close(out_fast, want, rtol=1e-5, atol=1e-5)
    # What the direct read declines keeps DLPack's checks and messages.
    with pytest.raises(ValueError, match="argument 'input'.*require gradient"):
        kiln.ops.rms_norm(out_fast, x.clone().requires_grad_(), w, 1e-6)
    with pytest.raises(TypeError, match="argument 'input'.*dtype"):
        kiln.ops.rms_norm(out_fast, x.double(), w, 1e-6)
    param = torch.nn.Parameter(x.clone(), requires_grad=False)  # read directly too
    assert kiln.Tensor(param).strides == kiln.Tensor(ViaDlpack(param)).strides
    out_param = torch.zeros(5, 32)
    kiln.ops.rms_norm(out_param, param, w, 1e-6)
    assert torch.equal(out_param, out_fast)
    # Other layouts go the DLPack way and get its message, naming the argument.
    with pytest.raises(ValueError, match="argument 'input' cannot be shared through DLPack"):
        kiln.ops.rms_norm(out_fast, x.to_sparse(), w, 1e-6)
    # Lazily negated views hold the values before the negation (DLPack exports them as they
    # are): refused by name, whichever route the tensor would take.
    negated = torch.randn(5, 32, dtype=torch.complex64).conj().imag
    assert negated.is_neg()
    grad_negated = torch._neg_view(x.clone().requires_grad_())  # the DLPack route's check
    for t in (negated, torch._neg_view(x), torch.nn.Parameter(torch._neg_view(x), False),
              grad_negated):
        with pytest.raises(ValueError, match="argument 'input' is a lazily negated torch view"):
            kiln.ops.rms_norm(out_fast, t, w, 1e-6)
    # A conjugation bit needs a complex dtype: the fast path never takes one, the other path
    # names the bit before the dtype.
    with pytest.raises(ValueError, match="argument 'input' is a lazily conjugated torch view"):
        kiln.ops.rms_norm(out_fast, torch.randn(5, 32, dtype=torch.complex64).conj(), w, 1e-6)
    kiln.ops.rms_norm(out_fast, torch._neg_view(x).resolve_neg(), w, 1e-6)
    torch.testing.assert_close(out_fast, -want, rtol=1e-5, atol=1e-5)


@needs_torch
def test_torch_schema_order_adapters_match_kiln_ops():
    import torch

    import kiln.torch as kt

    kt.register()
    g = torch.Generator().manual_seed(3)
    po, so = torch.randn(3, 2, 8, generator=g), torch.randn(3, 2, 8, generator=g)
    pl, sl = torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g)
    out_a, lse_a = torch.empty(3, 2, 8), torch.empty(2, 3)
    out_b, lse_b = torch.empty(3, 2, 8), torch.empty(2, 3)
    kiln.ops.merge_attn_states(out_a, po, pl, so, sl, output_lse=lse_a)
    torch.ops.kiln.merge_attn_states(out_b, lse_b, po, pl, so, sl, None)  # schema order
    assert torch.equal(out_a, out_b) and torch.equal(lse_a, lse_b)
    seq_lens = torch.tensor([5, 7], dtype=torch.int32)
    qsl = torch.tensor([0, 1, 3], dtype=torch.int32)
    md = torch.ops.kiln.cpu_attn_get_scheduler_metadata(2, 4, 2, 32, seq_lens, torch.float32,
                                                        qsl, True, -1, "vec", True)
    want = kiln.ops.cpu_attn_get_scheduler_metadata(2, 4, 2, 32, seq_lens.numpy(), "f32",
                                                    qsl.numpy(), True, -1, "vec", True)
    assert md.dtype == torch.int8 and np.array_equal(md.numpy(), want)


@contextlib.contextmanager
def vllm_stand_in(*namespaces):
    """torch.library DEF libraries standing in for vLLM's extension (one per namespace); on
    exit, they and any override kiln.torch registered over them are gone again."""
    import torch

    import kiln.torch as kt

    held = len(kt._libraries)
    libs = [torch.library.Library(ns, "DEF") for ns in namespaces]
    try:
        yield libs
    finally:  # leave no stand-in or override behind for later tests in this process
        for held_lib in kt._libraries[held:]:
            held_lib._destroy()
        del kt._libraries[held:]
        kt.overridden.clear()
        kt.not_overridden.clear()
        for lib in libs:
            lib._destroy()


@needs_torch
def test_override_vllm_takes_only_the_ops_whose_schema_fits():
    # A stand-in for vLLM's extension (the real one is not installable from Debian), as newer
    # and older vLLM builds define their ops: rms_norm, rotary_embedding (newer extras),
    # fused_add_rms_norm (older: weight not optional) and a cache write in _C_cache_ops (older)
    # kiln can take; the scheduler in its baseline schema but an attention neither kiln's
    # schema nor its adapted newer one fits (so neither of the pair); an extra argument kiln
    # lacks; a default that differs from kiln's; one GEMM op without the rest of its group.
    import torch

    import kiln.torch as kt

    with vllm_stand_in("_C", "_C_cache_ops") as (lib, cache_lib):
        lib.define("rms_norm(Tensor(a!) out, Tensor input, Tensor? weight, float epsilon) -> ()")
        lib.define("fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, "
                   "float epsilon) -> ()")
        lib.define("rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, "
                   "int head_size, Tensor cos_sin_cache, bool is_neox, int rope_dim_offset=0, "
                   "bool inverse=False) -> ()")
        cache_lib.define("reshape_and_cache_flash(Tensor key, Tensor value, "
                         "Tensor(a!) key_cache, Tensor(b!) value_cache, Tensor slot_mapping, "
                         "str kv_cache_dtype, Tensor k_scale, Tensor v_scale) -> ()")
        lib.define("get_scheduler_metadata(int num_req, int num_heads_q, int num_heads_kv, "
                   "int head_dim, Tensor seq_lens, ScalarType dtype, Tensor query_start_loc, "
                   "bool casual, int window_size, str isa_hint, bool enable_kv_split) -> Tensor")
        lib.define("cpu_attention_with_kv_cache(Tensor query, Tensor key_cache, "
                   "Tensor value_cache, Tensor(a!) output, Tensor query_start_loc, "
                   "Tensor seq_lens, float scale, bool causal, Tensor? alibi_slopes, "
                   "SymInt sliding_window_size, Tensor block_table, float softcap, "
                   "Tensor scheduler_metadata, Tensor? s_aux, Tensor? dynamic_causal, "
                   "Tensor? sink_scales) -> ()")
        lib.define("silu_and_mul(Tensor(a!) out, Tensor input, float limit) -> ()")
        lib.define("cpu_attn_reshape_and_cache(Tensor key, Tensor value, Tensor(a!) key_cache, "
                   "Tensor(b!) value_cache, Tensor slot_mapping, str isa, float k_scale=2.0) "
                   "-> ()")
        lib.define("onednn_mm(Tensor(a!) c, Tensor a, Tensor? bias, int handler) -> ()")
        with pytest.warns(UserWarning, match="keep vLLM's kernels"):
            kt.register(override_vllm=True)
        assert sorted(kt.overridden) == ["fused_add_rms_norm", "reshape_and_cache_flash",
                                         "rms_norm", "rotary_embedding"]
        why = kt.not_overridden
        assert ("argument 10 is 'Tensor block_table' in vLLM's schema, 'int "
                "sliding_window_right' in kiln's; nor the newer schema kiln adapts (argument 15 "
                "is 'Optional[Tensor] sink_scales'") in why["cpu_attention_with_kv_cache"]
        assert "together with cpu_attention_with_kv_cache or" in why["get_scheduler_metadata"]
        assert "lacks (float limit)" in why["silu_and_mul"]
        assert "defaults to 2.0 in vLLM's schema, to 1.0 in kiln's" in why[
            "cpu_attn_reshape_and_cache"]
        assert "create_onednn_mm_handler (which vLLM lacks)" in why["onednn_mm"]
        x, w = torch.randn(3, 64), torch.randn(64)
        via_vllm, direct = torch.empty_like(x), torch.empty_like(x)
        torch.ops._C.rms_norm(via_vllm, x, w, 1e-6)  # now kiln's kernel
        kiln.ops.rms_norm(direct, x, w, 1e-6)
        assert torch.equal(via_vllm, direct)
        pos = torch.tensor([0, 3])
        q, cache = torch.randn(2, 2 * 16), torch.randn(8, 16)
        q_kiln = q.clone()
        torch.ops._C.rotary_embedding(pos, q, None, 16, cache, True)
        kiln.ops.rotary_embedding(pos, q_kiln, None, 16, cache, True)
        assert torch.equal(q, q_kiln)
        with pytest.raises(ValueError, match="inverse=True is not supported"):
            torch.ops._C.rotary_embedding(pos, q, None, 16, cache, True, 0, True)
        with pytest.raises(ValueError, match="rope_dim_offset=4 is not supported"):
            torch.ops._C.rotary_embedding(pos, q, None, 16, cache, True, 4)


@needs_torch
def test_override_vllm_adapts_the_window_size_attention_schema():
    # vLLM 0.32's scheduler and attention (one window length, dynamic_causal): kiln's adapters
    # take them; results equal kiln.ops' with the window converted as in spec 3.4.1, and the
    # one case whose query positions differ (non-causal window over partial queries) refused.
    import torch

    import kiln.torch as kt

    with vllm_stand_in("_C") as (lib,):
        lib.define("get_scheduler_metadata(int num_req, int num_heads_q, int num_heads_kv, "
                   "int head_dim, Tensor seq_lens, ScalarType dtype, Tensor query_start_loc, "
                   "bool casual, int window_size, str isa_hint, bool enable_kv_split, "
                   "Tensor? dynamic_causal, str kv_cache_dtype=\"auto\") -> Tensor")
        lib.define("cpu_attention_with_kv_cache(Tensor query, Tensor key_cache, "
                   "Tensor value_cache, Tensor(a!) output, Tensor query_start_loc, "
                   "Tensor seq_lens, float scale, bool causal, Tensor? alibi_slopes, "
                   "SymInt sliding_window_size, Tensor block_table, float softcap, "
                   "Tensor scheduler_metadata, Tensor? s_aux, Tensor? dynamic_causal, "
                   "float k_scale=1., float v_scale=1., str kv_cache_dtype=\"auto\") -> ()")
        kt.register(override_vllm=True)
        assert sorted(kt.overridden) == ["cpu_attention_with_kv_cache", "get_scheduler_metadata"]
        g = torch.Generator().manual_seed(7)
        heads, kv_heads, d, bs, blocks = 4, 2, 32, 32, 6
        kv = torch.randn(blocks, kv_heads, 2 * bs, d, generator=g)
        k_cache, v_cache = kv.chunk(2, dim=2)
        table = torch.tensor([[0, 2, 4], [1, 3, 5]], dtype=torch.int32)
        for causal, window, q_lens in ((True, 20, (3, 1)), (False, -1, (3, 1)),
                                       (False, 20, (70, 90)), (False, 20, (3, 1))):
            seq_lens = torch.tensor((70, 90), dtype=torch.int32)
            qsl = torch.tensor((0, q_lens[0], sum(q_lens)), dtype=torch.int32)
            q = torch.randn(sum(q_lens), heads, d, generator=g)
            via_vllm, direct = torch.zeros_like(q), torch.zeros_like(q)
            md = torch.ops._C.get_scheduler_metadata(2, heads, kv_heads, d, seq_lens,
                                                     torch.float32, qsl, causal, window, "vec",
                                                     True, None)
            args = (q, k_cache, v_cache, via_vllm, qsl, seq_lens, d**-0.5, causal, None, window,
                    table, 0.0, md, None, None)
            if not causal and window != -1 and q_lens != (70, 90):
                with pytest.raises(ValueError, match="non-causal sliding window over requests"):
                    torch.ops._C.cpu_attention_with_kv_cache(*args)
                continue
            torch.ops._C.cpu_attention_with_kv_cache(*args)
            left = -1 if window == -1 else window - 1
            md_kiln = kiln.ops.cpu_attn_get_scheduler_metadata(2, heads, kv_heads, d, seq_lens,
                                                               torch.float32, qsl, causal,
                                                               window, "vec", True)
            kiln.ops.cpu_attention_with_kv_cache(q, k_cache, v_cache, direct, qsl, seq_lens,
                                                 d**-0.5, causal, None,
                                                 (left, 0 if causal else left), table, 0.0,
                                                 md_kiln)
            assert torch.equal(via_vllm, direct), (causal, window, q_lens)
        with pytest.raises(ValueError, match="dynamic_causal is not supported"):
            torch.ops._C.get_scheduler_metadata(2, heads, kv_heads, d, seq_lens, torch.float32,
                                                qsl, True, -1, "vec", True, seq_lens)


def test_torch_module_imports_without_torch():
    import kiln.torch as kt

    helpers = {"cpu_attn_metadata_bytes", "cpu_attn_get_scheduler_metadata_into"}
    assert set(kiln.ops.__all__) - helpers == set(kt.SCHEMAS)
    for name in kt.SCHEMAS:
        assert callable(kt.implementation(name))


def readme_example():
    text = (REPO / "README.md").read_text()
    section = text.split("## From Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_example_runs_as_written():
    code = readme_example()
    assert 5 <= len(code.strip().splitlines()) <= 14
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip(), "the example prints its result"


def test_vs_vllm_cpu_script_runs_or_says_why():
    script = REPO / "bench" / "python" / "vs_vllm_cpu.py"
    done = subprocess.run([sys.executable, str(script), "--tokens", "1", "--decode", "1x64",
                           "--prefill", "", "--head-sizes", "64", "--gemm-m", "1", "--reps", "3",
                           "--rounds", "1"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    has_peer = all(importlib.util.find_spec(m) is not None for m in ("torch", "vllm"))
    if has_peer:
        assert "copy bandwidth ceiling" in done.stdout
    else:
        assert done.stdout.startswith("vs_vllm_cpu: skipped: "), done.stdout
