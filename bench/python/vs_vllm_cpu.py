#!/usr/bin/env python3
"""kiln vs vLLM's CPU kernels, side by side, on the same torch tensors.

    PYTHONPATH=build/release/python python3 bench/python/vs_vllm_cpu.py \\
        [--vllm-lib PATH] [--tokens 1,32,512] [--decode 1x512,8x2048] [--prefill 1024] \\
        [--head-sizes 128,80] [--gemm-m 1,32,256] [--reps 20] [--rounds 3]

For each op vLLM's CPU build provides (rms_norm, fused_add_rms_norm, rotary_embedding, the
gated activations, reshape_and_cache_flash where the build still has it, the CPU attention
ops: cpu_attn_reshape_and_cache, cpu_attention_with_kv_cache at decode and prefill shapes,
and onednn_mm), it runs vLLM's kernel (``torch.ops._C.<op>`` /
``torch.ops._C_cache_ops.<op>``) and ``kiln.ops.<op>`` on the same inputs: once each from the
same inputs to compare the results (the largest difference, the share of identical
elements), then in alternating timed blocks (the best median of each side). It prints µs per
call and GB/s (GFLOP/s for prefill attention and onednn_mm) of both and vLLM's time over
kiln's, next to this machine's copy bandwidth measured in the same run.

vLLM's kernels come from ``import vllm._custom_ops`` (a vLLM CPU install), or, with
``--vllm-lib``, from one of its extension libraries loaded with ``torch.ops.load_library``
alone (e.g. ``vllm/_C_AVX2.abi3.so`` unpacked from a CPU wheel; vLLM's Python dependencies are
then not needed). When torch or vLLM is not available it prints why and exits 0;
``--kiln-only`` then still times kiln's side on torch tensors (torch needed).

Both sides run on the OpenMP threads OMP_NUM_THREADS allows (torch's runtime and the system's
one). Each block of one side's calls starts after a pause, so that the idle workers of the
other runtime have stopped spinning (libgomp's default wait policy); OMP_WAIT_POLICY=PASSIVE
would slow both sides' small calls (vLLM's attention decode 1x512 took ~20x longer with it
here) and ACTIVE makes the two runtimes fight over the cores (docs/python.md).
"""

from __future__ import annotations

import argparse
import functools
import itertools
import os
import statistics
import sys
import time


def why_not(kiln_only, vllm_lib):
    """Why the comparison cannot run here (None when it can); loads vLLM's ops when it can."""
    try:
        import torch
    except ImportError as e:
        return f"torch is not importable ({e}); install torch (CPU) and vLLM's CPU wheel"
    try:
        import kiln  # noqa: F401
    except ImportError as e:
        return f"kiln is not importable ({e}); build it and set PYTHONPATH=build/release/python"
    if kiln_only:
        return None
    if vllm_lib:
        try:
            torch.ops.load_library(vllm_lib)
        except Exception as e:  # noqa: BLE001  (any failure to load the library is a reason)
            return f"--vllm-lib {vllm_lib} does not load ({type(e).__name__}: {e})"
        return None
    try:
        import vllm._custom_ops  # noqa: F401  (loads torch.ops._C)
    except Exception as e:  # noqa: BLE001  (any failure to load the wheel is a reason)
        return (f"vLLM's CPU wheel is not importable ({type(e).__name__}: {e}); "
                f"--vllm-lib loads its extension library alone, --kiln-only times kiln alone")
    return None


def vllm_op(torch, namespace, name):
    """vLLM's op torch.ops.<namespace>.<name>, or None when the loaded build has none."""
    try:
        return getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return None


def schema_call(op, values):
    """op bound to the entries of `values` its schema names (vLLM's signatures change between
    releases: e.g. one sliding_window_size instead of a left / right pair, dynamic_causal)."""
    names = [a.name for a in op.default._schema.arguments]
    return functools.partial(op, **{n: values[n] for n in names if n in values})


def median_us(fn, reps):
    fn()  # warm-up (and kiln's first-use compile)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def copy_ceiling_gbs(torch, reps):
    """Copy bandwidth of this machine now: read + write of a 256 MiB buffer."""
    src = torch.empty(64 << 20, dtype=torch.float32).uniform_()
    dst = torch.empty_like(src)
    us = median_us(lambda: dst.copy_(src), reps)
    return 2 * src.numel() * 4 / (us * 1e-6) / 1e9


class Case:
    """One op at one shape: `work` bytes (GB/s) or flops (GFLOP/s, when `flops`) per call,
    vLLM's op (None when the build lacks it) and the two calls. `pairs` holds the (vLLM's,
    kiln's) tensors each call writes, compared after one call of each from the same inputs;
    `inplace` the (vLLM's, kiln's) tensors both read and write, which are reset to their
    starting values before that checking call."""

    def __init__(self, name, shape, work, op, run_vllm, run_kiln, pairs, flops=False,
                 inplace=(), no_vllm=None):
        self.name, self.shape, self.work, self.flops = name, shape, work, flops
        self.op, self.run_vllm, self.run_kiln, self.pairs = op, run_vllm, run_kiln, pairs
        self.inplace = [(v, k, v.clone()) for v, k in inplace]
        # Why vLLM has no side here (op is None): its build lacks the op, unless this says.
        self.no_vllm = no_vllm or f"vLLM's build has no {name}"

    def check(self):
        """Runs both sides once from the same inputs; returns (max |diff|, the share of
        identical elements) over `pairs`."""
        for v, k, start in self.inplace:
            v.copy_(start)
            k.copy_(start)
        self.run_vllm()
        self.run_kiln()
        worst, same, count = 0.0, 0, 0
        for v, k in self.pairs:
            diff = (v.float() - k.float()).abs()
            worst = max(worst, float(diff.nan_to_num(float("inf")).max()) if diff.numel() else 0)
            same += int((v.view(-1) == k.view(-1)).sum()) + int(
                (v.view(-1).isnan() & k.view(-1).isnan()).sum())
            count += v.numel()
        return worst, same / max(count, 1)


def row_cases(torch, tokens):
    """The row ops and the cache writes at `tokens` rows."""
    import kiln

    ops = torch.ops._C
    bf16 = torch.bfloat16
    h, d = 4096, 11008
    x = torch.randn(tokens, h, dtype=bf16)
    w = torch.randn(h, dtype=bf16)
    out_v, out_k = torch.empty_like(x), torch.empty_like(x)
    yield Case("rms_norm", tokens, 2 * x.numel() * 2 + h * 2, vllm_op(torch, "_C", "rms_norm"),
               lambda: ops.rms_norm(out_v, x, w, 1e-6),
               lambda: kiln.ops.rms_norm(out_k, x, w, 1e-6), [(out_v, out_k)])

    res_v = torch.randn(tokens, h, dtype=bf16)
    res_k = res_v.clone()
    in_v, in_k = x.clone(), x.clone()
    yield Case("fused_add_rms_norm", tokens, 4 * x.numel() * 2 + h * 2,
               vllm_op(torch, "_C", "fused_add_rms_norm"),
               lambda: ops.fused_add_rms_norm(in_v, res_v, w, 1e-6),
               lambda: kiln.ops.fused_add_rms_norm(in_k, res_k, w, 1e-6),
               [(in_v, in_k), (res_v, res_k)], inplace=[(in_v, in_k), (res_v, res_k)])

    gate = torch.randn(tokens, 2 * d, dtype=bf16)
    for act in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        o_v = torch.empty(tokens, d, dtype=bf16)
        o_k = torch.empty_like(o_v)
        yield Case(act, tokens, 3 * tokens * d * 2, vllm_op(torch, "_C", act),
                   lambda act=act, o_v=o_v: getattr(ops, act)(o_v, gate),
                   lambda act=act, o_k=o_k: getattr(kiln.ops, act)(o_k, gate), [(o_v, o_k)])

    hq, hkv, hd = 32, 8, 128
    pos = torch.randint(0, 4096, (tokens,))
    cache = torch.randn(4096, hd, dtype=bf16)
    q_v, k_v = torch.randn(tokens, hq * hd, dtype=bf16), torch.randn(tokens, hkv * hd, dtype=bf16)
    q_k, k_k = q_v.clone(), k_v.clone()
    yield Case("rotary_embedding", tokens,
               2 * (q_v.numel() + k_v.numel()) * 2 + tokens * hd * 2,
               vllm_op(torch, "_C", "rotary_embedding"),
               lambda: ops.rotary_embedding(pos, q_v, k_v, hd, cache, True),
               lambda: kiln.ops.rotary_embedding(pos, q_k, k_k, hd, cache, True),
               [(q_v, q_k), (k_v, k_k)], inplace=[(q_v, q_k), (k_v, k_k)])

    # Older vLLM CPU builds register the paged cache writes in their own namespace.
    bs, nb = 16, (tokens + 15) // 16 + 1
    key = torch.randn(tokens, hkv, hd, dtype=bf16)
    val = torch.randn(tokens, hkv, hd, dtype=bf16)
    kc_v = torch.zeros(nb, bs, hkv, hd, dtype=bf16)
    vc_v = torch.zeros_like(kc_v)
    kc_k, vc_k = kc_v.clone(), vc_v.clone()
    slots = torch.randperm(nb * bs)[:tokens]
    one = torch.ones(1)
    flash = vllm_op(torch, "_C_cache_ops", "reshape_and_cache_flash")
    yield Case("reshape_and_cache_flash", tokens, 4 * key.numel() * 2 + tokens * 8, flash,
               lambda: flash(key, val, kc_v, vc_v, slots, "auto", one, one),
               lambda: kiln.ops.reshape_and_cache_flash(key, val, kc_k, vc_k, slots, "auto",
                                                        one, one),
               [(kc_v, kc_k), (vc_v, vc_k)])

    # The CPU attention's cache write: vLLM's "vec" slabs (K transposed [D, bs], V natural),
    # in one tensor per layer chunked on the token axis as vLLM's backend allocates it.
    bs = 128
    nb = (tokens + bs - 1) // bs + 1
    kv_v = torch.zeros(nb, hkv, 2 * bs, hd, dtype=bf16)
    kv_k = kv_v.clone()
    kc_v, vc_v = kv_v.chunk(2, dim=2)
    kc_k, vc_k = kv_k.chunk(2, dim=2)
    slots = torch.randperm(nb * bs)[:tokens]
    cpu_write = vllm_op(torch, "_C", "cpu_attn_reshape_and_cache")
    yield Case("cpu_attn_reshape_and_cache", tokens, 4 * key.numel() * 2 + tokens * 8, cpu_write,
               lambda: cpu_write(key, val, kc_v, vc_v, slots, "vec"),
               lambda: kiln.ops.cpu_attn_reshape_and_cache(key, val, kc_k, vc_k, slots, "vec"),
               [(kv_v, kv_k)])


def attention_cases(torch, decode_shapes, prefill_lengths, head_sizes, kv_heads):
    """cpu_attention_with_kv_cache, bf16 query and cache, 32 query heads over `kv_heads` KV
    heads (4: GQA 8, as bench_attention), block size 128, causal, KV split allowed: decode
    (one query token per sequence; GB/s of K and V read) and a prefill of one sequence
    (GFLOP/s of Q·Kᵀ and P·V over the causal triangle), at each head size. The ISA string is
    vLLM's choice without AMX: "vec" where the head size is a multiple of 32, "vec16" for the
    other multiples of 16 (the same slab layout)."""
    import kiln

    bf16 = torch.bfloat16
    hq, hkv, bs = 32, kv_heads, 128
    scheduler = vllm_op(torch, "_C", "get_scheduler_metadata")
    attention = vllm_op(torch, "_C", "cpu_attention_with_kv_cache")
    shapes = [("decode", batch, 1, context) for batch, context in decode_shapes]
    shapes += [("prefill", 1, length, length) for length in prefill_lengths]
    for hd, (kind, batch, q_len, context) in itertools.product(head_sizes, shapes):
        isa = "vec" if hd % 32 == 0 else "vec16"
        blocks_per_seq = (context + bs - 1) // bs
        blocks = batch * blocks_per_seq
        kv = torch.randn(blocks, hkv, 2 * bs, hd).to(bf16)
        key_cache, value_cache = kv.chunk(2, dim=2)
        block_table = torch.randperm(blocks).to(torch.int32).view(batch, blocks_per_seq)
        seq_lens = torch.full((batch,), context, dtype=torch.int32)
        query_start_loc = torch.arange(batch + 1, dtype=torch.int32) * q_len
        query = torch.randn(batch * q_len, hq, hd).to(bf16)
        out_v, out_k = torch.empty_like(query), torch.empty_like(query)
        plan = dict(num_reqs=batch, num_req=batch, num_heads=hq, num_heads_q=hq,
                    num_kv_heads=hkv, num_heads_kv=hkv, head_dim=hd, seq_lens=seq_lens,
                    dtype=bf16, query_start_loc=query_start_loc, causal=True, casual=True,
                    window_size=-1, sliding_window_size=-1, isa=isa, isa_hint=isa,
                    enable_kv_split=True, dynamic_causal=None, kv_cache_dtype="auto")
        metadata_k = kiln.ops.cpu_attn_get_scheduler_metadata(
            batch, hq, hkv, hd, seq_lens, bf16, query_start_loc, True, -1, isa, True)
        run_vllm = None
        if scheduler is not None and attention is not None:
            metadata_v = schema_call(scheduler, plan)()
            run_vllm = schema_call(attention, dict(
                plan, query=query, key_cache=key_cache, value_cache=value_cache, output=out_v,
                scale=hd**-0.5, alibi_slopes=None, sliding_window_left=-1,
                sliding_window_right=-1, block_table=block_table, softcap=0.0,
                scheduler_metadata=metadata_v, sheduler_metadata=metadata_v, s_aux=None))

        def run_kiln(query=query, key_cache=key_cache, value_cache=value_cache, out_k=out_k,
                     query_start_loc=query_start_loc, seq_lens=seq_lens,
                     block_table=block_table, metadata_k=metadata_k, hd=hd):
            kiln.ops.cpu_attention_with_kv_cache(
                query, key_cache, value_cache, out_k, query_start_loc, seq_lens, hd**-0.5,
                True, None, (-1, -1), block_table, 0.0, metadata_k)

        if kind == "decode":
            work, flops = batch * context * hkv * hd * 2 * 2, False
        else:  # two matmuls of 2 flops per multiply-add over the causal triangle
            work, flops = 2 * 2 * hq * hd * q_len * (q_len + 1) // 2, True
        # vLLM's side needs both ops: a build with the attention but no scheduler has none.
        yield Case(f"cpu_attention {kind} D{hd}", f"{batch}x{context}", work,
                   attention if run_vllm else None, run_vllm, run_kiln, [(out_v, out_k)], flops)


def gemm_cases(torch, ms, dtypes):
    """onednn_mm: c [M, 4096] = a [M, 4096] @ b with b the transpose of a [4096, 4096] weight
    (vLLM's layout), no bias; GFLOP/s of 2·M·N·K. Each side packs the weight into its own
    handler once (vLLM's an int it wraps in a tensor, kiln's an int)."""
    import kiln

    create = vllm_op(torch, "_C", "create_onednn_mm_handler")
    mm = vllm_op(torch, "_C", "onednn_mm")
    n = k = 4096
    for dtype_name in dtypes:
        dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
        weight = (torch.randn(n, k) * 0.05).to(dtype)
        b = weight.t()
        handle_k = kiln.ops.create_onednn_mm(b, 128)
        handle_v, no_vllm = None, None
        if create is not None and mm is not None:
            try:
                handle_v = torch.tensor(create(b, 128), dtype=torch.int64)
            except RuntimeError as e:  # e.g. its oneDNN has no bf16 matmul on this ISA
                no_vllm = f"vLLM: {str(e).splitlines()[0][:60]}"
        for m in ms:
            a = torch.randn(m, k).to(dtype)
            c_v, c_k = torch.empty(m, n, dtype=dtype), torch.empty(m, n, dtype=dtype)
            yield Case(f"onednn_mm {dtype_name}", f"{m}x{k}", 2 * m * n * k,
                       mm if handle_v is not None else None,
                       lambda a=a, c_v=c_v: mm(c_v, a, None, handle_v),
                       lambda a=a, c_k=c_k: kiln.ops.onednn_mm(c_k, a, None, handle_k),
                       [(c_v, c_k)], flops=True, no_vllm=no_vllm)


def print_row(case, us_v, us_k, check=None, note=""):
    """One line: µs per call and G(B|FLOP)/s of both sides (work per µs / 1e3), vLLM's time
    over kiln's, and the check (the largest |difference| of the outputs and the share of
    identical elements), or `note`."""
    kiln_cols = f"{us_k:9.1f} {case.work / us_k / 1e3:8.1f}"
    vllm_cols = (f"{'-':>9} {'-':>8}" if us_v is None else
                 f"{us_v:9.1f} {case.work / us_v / 1e3:8.1f}")
    ratio = "" if us_v is None else f"{us_v / us_k:6.2f}x"
    tail = note if check is None else f"{check[0]:9.3g} {100 * check[1]:6.2f}%"
    print(f"{case.name:27} {str(case.shape):>7} {vllm_cols} {kiln_cols} {ratio:>7}  {tail}")


def parse_ints(text):
    """'1,32,512' -> [1, 32, 512] ('' -> [])."""
    return [int(n) for n in text.split(",") if n]


def parse_shapes(text):
    """'1x512,8x2048' -> [(1, 512), (8, 2048)]."""
    if not text:
        return []
    return [tuple(int(n) for n in item.split("x")) for item in text.split(",")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="1,32,512", help="row counts of the row ops")
    parser.add_argument("--decode", default="1x512,1x2048,8x512,8x2048",
                        help="attention decode shapes, batch x context ('' for none)")
    parser.add_argument("--prefill", default="1024",
                        help="attention prefill lengths, one sequence each ('' for none)")
    parser.add_argument("--head-sizes", default="128,80",
                        help="attention head sizes (80: vLLM's vec16 path)")
    parser.add_argument("--gemm-m", default="1,32,256",
                        help="onednn_mm row counts, N = K = 4096 ('' for none)")
    parser.add_argument("--gemm-dtypes", default="f32,bf16")
    parser.add_argument("--kv-heads", type=int, default=4,
                        help="attention KV heads for the 32 query heads (4: GQA 8)")
    parser.add_argument("--reps", type=int, default=20, help="calls per timed block")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating timed blocks per side (the best median is kept)")
    parser.add_argument("--vllm-lib", help="vLLM's extension library to load instead of "
                        "importing vllm (e.g. vllm/_C_AVX2.abi3.so from a CPU wheel)")
    parser.add_argument("--kiln-only", action="store_true",
                        help="time kiln alone (no vLLM needed)")
    args = parser.parse_args()
    reason = why_not(args.kiln_only, args.vllm_lib)
    if reason:
        print(f"vs_vllm_cpu: skipped: {reason}")
        return 0
    import torch

    ceiling = copy_ceiling_gbs(torch, max(5, args.reps // 5))
    print(f"copy bandwidth ceiling (this run): {ceiling:.1f} GB/s, torch threads "
          f"{torch.get_num_threads()}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}"
          f", OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '-')}")
    print(f"{'op':27} {'shape':>7} {'vLLM us':>9} {'GB/s':>8} {'kiln us':>9} {'GB/s':>8} "
          f"{'vLLM/kiln':>7}  {'max|diff|':>9} {'same':>7}   (GFLOP/s: prefill, onednn_mm)")
    # Each case runs as its generator makes it: the next one's tensors are not allocated yet.
    cases = itertools.chain(
        *(row_cases(torch, t) for t in parse_ints(args.tokens)),
        attention_cases(torch, parse_shapes(args.decode), parse_ints(args.prefill),
                        parse_ints(args.head_sizes), args.kv_heads),
        gemm_cases(torch, parse_ints(args.gemm_m), [d for d in args.gemm_dtypes.split(",") if d]))
    for case in cases:
        check = None if args.kiln_only or case.op is None else case.check()
        if check is None:
            why = "--kiln-only" if args.kiln_only else f"({case.no_vllm})"
            us_k = min(median_us(case.run_kiln, args.reps) for _ in range(args.rounds))
            print_row(case, None, us_k, note=why)
            continue
        # Alternating blocks, the best median of each side: this VM has slow phases lasting
        # seconds (the same call 1.8x slower), which one block per side would hand to either.
        us_k = us_v = float("inf")
        for _ in range(args.rounds):
            us_k = min(us_k, median_us(case.run_kiln, args.reps))
            time.sleep(0.05)  # kiln's idle workers stop spinning before vLLM's run, and back
            us_v = min(us_v, median_us(case.run_vllm, args.reps))
            time.sleep(0.05)
        print_row(case, us_v, us_k, check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
