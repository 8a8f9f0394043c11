"""GPU benchmark of kernels/: every Triton kernel checked against its reference, then timed.

    python benchmarks/kernels_gpu.py            # all cases -> benchmarks/results/kernels_gpu.json
    python benchmarks/kernels_gpu.py --quick    # fewer batch sizes and repetitions

First a correctness sweep on small odd shapes (ragged lengths, tails that are not block
multiples, D = 16..128, fp32/fp16/bf16, slotted and packed layouts), against float64 maths.
Then, at the embedded model's shapes (H=2, D=64, 64 tokens/frame, 2-frame chunks = 128
queries, up to 8 frames = 512 keys, batch 1..16) and at a Wan-2.1-1.3B-like shape (1560
tokens/frame, 3-frame chunks = 4680 queries, 12 heads x 128, up to 21 frames = 32760 keys,
bf16, batch 1..8):
- chunk_attention (Triton) against the per-sample SDPA loop (the reference), against the GPU's
  torch path (`chunk_attention_padded`: gather to the longest length + one masked SDPA, what
  runs without Triton) and against one padded SDPA call with a key mask and no gather (a bound);
  indices are passed as the KV pool passes them (Python lists);
- int8_chunk_attention, with its error against exact attention (max abs, mean abs, cosine);
- modulate and gated_residual against the unfused torch code.
Times are CUDA-event medians per call, launch overhead included. Errors are against an fp32
computation of the same inputs. Exit codes: 2 no CUDA device / no Triton, 1 a check failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import kernels  # noqa: E402
from kernels._triton import HAS_TRITON, INSTALL_HINT, interpreting, triton_version  # noqa: E402
from kernels.chunk_attention import chunk_attention_padded, chunk_attention_reference  # noqa: E402
from kernels.int8_attention import int8_chunk_attention_reference  # noqa: E402
from kernels.modulation import gated_residual_reference, modulate_reference  # noqa: E402
from kernels.varlen import KVLayout, kv_layout  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
DEV = torch.device("cuda")

# Small-shape checks against float64 (same bounds as tests/kernels; the GPU rounds to nearest).
TOL = {torch.float32: (1e-4, 1e-5), torch.float16: (3e-3, 3e-3), torch.bfloat16: (2e-2, 2e-2)}
INT8_MIN_COSINE = 0.999  # int8 against exact attention


@dataclass(frozen=True)
class ModelShape:
    name: str
    heads: int
    head_dim: int
    tokens_per_frame: int
    chunk_frames: int
    max_frames: int  # sink + window + chunk
    dim: int  # model width, for the modulation kernels
    batches: tuple[int, ...]
    dtypes: tuple[torch.dtype, ...]


EMBEDDED = ModelShape("embedded", 2, 64, 64, 2, 8, 128, (1, 2, 4, 8, 16), (torch.bfloat16, torch.float32))
WAN = ModelShape("wan-1.3b-like", 12, 128, 1560, 3, 21, 1536, (1, 2, 4, 8), (torch.bfloat16,))


def dname(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def time_ms(fn: Callable[[], object], warmup: int, reps: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def naive_attention(q: torch.Tensor, kv: KVLayout) -> torch.Tensor:
    """float64 softmax(q k^T / sqrt(D)) v per sample: the truth for the small checks."""
    out = []
    for i, (r, s, n) in enumerate(
        zip(kv.rows.tolist(), kv.starts.tolist(), kv.lengths.tolist(), strict=True)
    ):
        k, v = kv.k[r, :, s : s + n].double(), kv.v[r, :, s : s + n].double()
        scores = q[i].double() @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
        out.append(torch.softmax(scores, -1) @ v)
    return torch.stack(out)


def close(out: torch.Tensor, truth: torch.Tensor, dtype: torch.dtype) -> tuple[bool, float]:
    rtol, atol = TOL[dtype]
    err = (out.double() - truth.double()).abs()
    return bool((err <= atol + rtol * truth.double().abs()).all()), float(err.max())


# -- correctness sweep ----------------------------------------------------------------------
def small_checks() -> list[dict]:
    torch.manual_seed(0)
    rows = []
    cases = [  # (B, H, Nq, D, lengths)
        (1, 1, 7, 16, [5]),
        (3, 2, 130, 32, [1, 77, 200]),
        (2, 3, 64, 64, [64, 129]),
        (2, 2, 100, 128, [300, 45]),
    ]
    for b, h, nq, d, lengths in cases:
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for form in ("slotted", "packed"):
                cap = max(lengths) + 7
                q = torch.randn(b, h, nq, d, device=DEV).to(dtype)
                k = (torch.randn(b + 1, h, cap, d, device=DEV) + 0.5).to(dtype)
                v = torch.randn(b + 1, h, cap, d, device=DEV).to(dtype)
                slots = list(range(b, 0, -1))  # not in batch order
                if form == "slotted":
                    kw = {"slots": slots, "lengths": lengths}
                else:
                    k = torch.cat(
                        [k[s, :, :n].transpose(0, 1) for s, n in zip(slots, lengths, strict=True)]
                    ).contiguous()
                    v = torch.cat(
                        [v[s, :, :n].transpose(0, 1) for s, n in zip(slots, lengths, strict=True)]
                    ).contiguous()
                    cu = [0, *torch.tensor(lengths).cumsum(0).tolist()]
                    kw = {"cu_seqlens": torch.tensor(cu, dtype=torch.int32, device=DEV)}
                kv = kv_layout(q, k, v, **kw)
                truth = naive_attention(q, kv)
                ok, err = close(kernels.chunk_attention(q, k, v, **kw), truth, dtype)
                rows.append(check_row("chunk_attention", (b, h, nq, d, lengths), dtype, form, ok, err))
                if dtype != torch.float32 or d == 64:
                    out8 = kernels.int8_chunk_attention(q, k, v, max_seqlen=max(lengths), **kw)
                    emu = int8_chunk_attention_reference(q, kv)  # the launch's own blocks
                    tol8 = 1e-3 if dtype == torch.float32 else TOL[dtype][0]
                    err8 = float((out8.double() - emu.double()).abs().max())
                    cos = kernels.error_stats(out8, truth).cosine
                    ok8 = err8 <= tol8 + tol8 * float(emu.double().abs().max()) and cos >= INT8_MIN_COSINE
                    rows.append(
                        check_row(
                            "int8_chunk_attention vs emulation",
                            (b, h, nq, d, lengths),
                            dtype,
                            form,
                            ok8,
                            err8,
                        )
                    )
    for shape in ((1, 1, 1, 16), (2, 3, 5, 48), (2, 2, 64, 128), (1, 3, 7, 1536), (1, 1, 3, 5120)):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            x, shift, scale, gate, y = modulation_inputs(shape, dtype)
            truth = modulate_reference(x.double(), shift.double(), scale.double())
            rows.append(
                check_row(
                    "modulate", shape, dtype, "-", *close(kernels.modulate(x, shift, scale), truth, dtype)
                )
            )
            truth = gated_residual_reference(x.double(), gate.double(), y.double())
            rows.append(
                check_row(
                    "gated_residual",
                    shape,
                    dtype,
                    "-",
                    *close(kernels.gated_residual(x, gate, y), truth, dtype),
                )
            )
    return rows


def check_row(kernel: str, shape: object, dtype: torch.dtype, form: str, ok: bool, err: float) -> dict:
    row = {
        "kernel": kernel,
        "shape": str(shape),
        "dtype": dname(dtype),
        "form": form,
        "ok": ok,
        "max_error": err,
    }
    if not ok:
        print(f"  FAIL {kernel} {shape} {dname(dtype)} {form}: max error {err:.3g}")
    return row


def modulation_inputs(shape: tuple[int, int, int, int], dtype: torch.dtype) -> list[torch.Tensor]:
    b, t, p, c = shape
    x = torch.randn(b, t, p, c, device=DEV) * 2 + torch.randn(b, t, p, 1, device=DEV)
    mods = torch.randn(b, t, 1, 3 * c, device=DEV) * 0.5  # as dit.py's ada(c)[:, :, None]
    shift, scale, gate = mods.chunk(3, dim=-1)
    y = torch.randn(b, t, p, c, device=DEV)
    return [z.to(dtype) for z in (x, shift, scale, gate, y)]


# -- timed cases ----------------------------------------------------------------------------
def lengths_for(m: ModelShape, batch: int, pattern: str) -> list[int]:
    """Visible keys per session: all full, or sessions spread over every cache fill level."""
    if pattern == "full":
        return [m.max_frames * m.tokens_per_frame] * batch
    span = m.max_frames - m.chunk_frames + 1
    return [(m.chunk_frames + (5 * i) % span) * m.tokens_per_frame for i in range(batch)]


def attention_cases(
    m: ModelShape, batch: int, dtype: torch.dtype, pattern: str, warmup: int, reps: int
) -> list[dict]:
    h, d, nq = m.heads, m.head_dim, m.tokens_per_frame * m.chunk_frames
    cap = m.max_frames * m.tokens_per_frame
    lengths = lengths_for(m, batch, pattern)
    q = torch.randn(batch, h, nq, d, device=DEV, dtype=dtype)
    k = torch.randn(batch, h, cap, d, device=DEV, dtype=dtype)  # the pool's layer view: (slots, H, cap, D)
    v = torch.randn(batch, h, cap, d, device=DEV, dtype=dtype)
    slots = list(range(batch))  # Python lists, as the KV pool passes them
    lens = torch.tensor(lengths, device=DEV)
    kv = kv_layout(q, k, v, slots=slots, lengths=lengths, index_device="cpu")  # the references' layout
    if dtype == torch.float32:  # the fp32 reference is SDPA itself: judge both against float64
        truth = naive_attention(q, kv).float()
    else:
        kv32 = kv_layout(q.float(), k.float(), v.float(), slots=slots, lengths=lengths, index_device="cpu")
        truth = chunk_attention_reference(q.float(), kv32)

    lmax = max(lengths)
    mask = (torch.arange(lmax, device=DEV)[None, :] < lens[:, None])[:, None, None, :]  # (B, 1, 1, Lmax)

    def padded():
        # One batched call over the padded layout (no copy: slots 0..B-1 are the batch). The math
        # backend is excluded: at Wan sizes it would materialise B*H*Nq*L scores.
        with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION]):
            return F.scaled_dot_product_attention(q, k[:, :, :lmax], v[:, :, :lmax], attn_mask=mask)

    def exact():
        return kernels.chunk_attention(q, k, v, slots=slots, lengths=lengths)

    def int8():
        return kernels.int8_chunk_attention(q, k, v, slots=slots, lengths=lengths)

    def reference():
        return chunk_attention_reference(q, kv)

    def torch_path():
        return chunk_attention_padded(q, kv)

    flops = 4 * nq * sum(lengths) * d * h
    base = {"model": m.name, "dtype": dname(dtype), "batch": batch, "pattern": pattern, "queries": nq,
            "heads": h, "head_dim": d, "lengths": lengths}  # fmt: skip
    ms_ref = time_ms(reference, warmup, reps)
    err_ref = kernels.error_stats(reference(), truth)
    ms_torch = time_ms(torch_path, warmup, reps)
    err_torch = kernels.error_stats(torch_path(), truth).max_abs
    try:
        ms_pad: float | None = time_ms(padded, warmup, reps)
        err_pad: float | None = kernels.error_stats(padded(), truth).max_abs
    except (RuntimeError, torch.OutOfMemoryError) as e:  # no fused SDPA backend for this case
        ms_pad, err_pad = None, None
        print(
            f"  padded SDPA unavailable for {m.name} B={batch} {dname(dtype)}: {str(e).splitlines()[0][:100]}"
        )
    rows = []
    ms = time_ms(exact, warmup, reps)
    err = kernels.error_stats(exact(), truth)
    ok = err.max_abs <= max(2 * err_ref.max_abs, TOL[dtype][1]) and err.cosine > 0.9999
    rows.append({**base, "kernel": "chunk_attention", "ms_triton": ms, "ms_reference": ms_ref,
                 "speedup": ms_ref / ms, "ms_torch_padded": ms_torch, "speedup_vs_torch_padded": ms_torch / ms,
                 "torch_padded_max_error": err_torch, "ms_sdpa_padded": ms_pad,
                 "speedup_vs_padded": None if ms_pad is None else ms_pad / ms,
                 "tflops_triton": flops / ms / 1e9, "max_error": err.max_abs,
                 "reference_max_error": err_ref.max_abs, "sdpa_padded_max_error": err_pad, "ok": ok})  # fmt: skip
    if dtype != torch.float32:
        ms8 = time_ms(int8, warmup, reps)
        err8 = kernels.error_stats(int8(), truth)
        rows.append({**base, "kernel": "int8_chunk_attention", "ms_triton": ms8, "ms_reference": ms_ref,
                     "speedup": ms_ref / ms8, "ms_exact_triton": ms, "speedup_vs_exact_triton": ms / ms8,
                     "ms_sdpa_padded": ms_pad, "speedup_vs_padded": None if ms_pad is None else ms_pad / ms8,
                     "tflops_triton": flops / ms8 / 1e9, "max_error": err8.max_abs,
                     "mean_abs_error": err8.mean_abs, "cosine": err8.cosine,
                     "ok": err8.cosine >= INT8_MIN_COSINE})  # fmt: skip
    return rows


def modulation_cases(m: ModelShape, batch: int, dtype: torch.dtype, warmup: int, reps: int) -> list[dict]:
    shape = (batch, m.chunk_frames, m.tokens_per_frame, m.dim)
    x, shift, scale, gate, y = modulation_inputs(shape, dtype)
    base = {"model": m.name, "dtype": dname(dtype), "batch": batch, "shape": list(shape)}
    rows = []
    for name, fused, unfused, truth in (
        ("modulate", lambda: kernels.modulate(x, shift, scale), lambda: modulate_reference(x, shift, scale),
         modulate_reference(x.float(), shift.float(), scale.float())),
        ("gated_residual", lambda: kernels.gated_residual(x, gate, y), lambda: gated_residual_reference(x, gate, y),
         gated_residual_reference(x.float(), gate.float(), y.float())),
    ):  # fmt: skip
        ms, ms_ref = time_ms(fused, warmup, reps), time_ms(unfused, warmup, reps)
        err, err_ref = kernels.error_stats(fused(), truth), kernels.error_stats(unfused(), truth)
        ok = err.max_abs <= max(2 * err_ref.max_abs, TOL[dtype][1])
        rows.append({**base, "kernel": name, "ms_triton": ms, "ms_reference": ms_ref, "speedup": ms_ref / ms,
                     "max_error": err.max_abs, "reference_max_error": err_ref.max_abs, "ok": ok})  # fmt: skip
    return rows


def fmt(x: float | None, spec: str = ".3f") -> str:
    return "-" if x is None else format(x, spec)


def print_table(rows: list[dict]) -> None:
    head = f"{'kernel':<22}{'model':<15}{'dtype':<10}{'B':>3} {'keys':<9}{'triton ms':>10}{'ref ms':>9}{'speedup':>8}{'torch ms':>9}{'pad ms':>9}{'max err':>10}  ok"
    print(head)
    print("-" * len(head))
    for r in rows:
        keys = r.get("pattern", "-")
        print(
            f"{r['kernel']:<22}{r['model']:<15}{r['dtype']:<10}{r['batch']:>3} {keys:<9}{r['ms_triton']:>10.3f}"
            f"{r['ms_reference']:>9.3f}{r['speedup']:>8.2f}{fmt(r.get('ms_torch_padded')):>9}"
            f"{fmt(r.get('ms_sdpa_padded')):>9}"
            f"{r['max_error']:>10.2e}  {'ok' if r['ok'] else 'FAIL'}"
            + (f"  cos {r['cosine']:.5f}" if "cosine" in r else "")
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="batch 1 and the largest only, fewer repetitions")
    ap.add_argument("--reps", type=int, default=None, help="timed calls per case (median reported)")
    ap.add_argument("--out", type=Path, default=RESULTS / "kernels_gpu.json")
    args = ap.parse_args()

    if not torch.cuda.is_available():
        print(
            "kernels_gpu.py needs a CUDA device: torch.cuda.is_available() is False on this machine.",
            file=sys.stderr,
        )
        return 2
    if not HAS_TRITON:
        print(INSTALL_HINT, file=sys.stderr)
        return 2
    if interpreting():
        print("unset TRITON_INTERPRET: the benchmark times compiled kernels", file=sys.stderr)
        return 2
    # The kernels' own calls run Triton at every shape timed here (by default dispatch takes it
    # only where it measured faster, which is what these figures decide).
    os.environ["STREAMER_KERNELS"] = "triton"
    choice = kernels.backend(DEV)
    if choice.name != "triton":
        print(f"dispatch would not run Triton here: {choice.reason}", file=sys.stderr)
        return 2

    reps = args.reps or (10 if args.quick else 30)
    warmup = 3 if args.quick else 5
    gpu = torch.cuda.get_device_name()
    print(
        f"{gpu}, torch {torch.__version__}, triton {triton_version()}, CUDA {torch.version.cuda}; dispatch: {choice.reason}"
    )
    t0 = time.time()

    print("\ncorrectness sweep (small odd shapes against float64)")
    checks = small_checks()
    print(f"  {sum(c['ok'] for c in checks)}/{len(checks)} passed")

    rows: list[dict] = []
    for m in (EMBEDDED, WAN):
        batches = (m.batches[0], m.batches[-1]) if args.quick else m.batches
        for dtype in m.dtypes:
            for batch in batches:
                for pattern in ("full", "ragged") if batch > 1 else ("full",):
                    rows += attention_cases(m, batch, dtype, pattern, warmup, reps)
                rows += modulation_cases(m, batch, dtype, warmup, reps)
                torch.cuda.empty_cache()
    print()
    print_table(rows)

    result = {
        "gpu": gpu,
        "torch": torch.__version__,
        "triton": triton_version(),
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "seconds": round(time.time() - t0, 1),
        "dispatch": choice.reason,
        "env": {"STREAMER_KERNELS": "triton (set by the benchmark)"},
        "timing": f"CUDA-event median of {reps} calls after {warmup} warmup calls, launch overhead included",
        "errors": "against an fp32 computation of the same inputs (checks: against float64)",
        "checks": checks,
        "cases": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    failed = [c for c in checks + rows if not c["ok"]]
    print(f"\nwrote {args.out} ({len(rows)} cases, {len(checks)} checks, {time.time() - t0:.0f} s)")
    if failed:
        print(f"{len(failed)} checks FAILED (see 'ok': false in the JSON)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
