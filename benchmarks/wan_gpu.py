"""GPU benchmark of the causal Wan adapter: Wan2.1-T2V-1.3B shapes with random weights, bf16.

    python benchmarks/wan_gpu.py              # 832x480, 4 steps, streams 1,2,4,8 -> results/wan_gpu.json
    python benchmarks/wan_gpu.py --quick      # streams 1 and 4, fewer chunks
    python benchmarks/wan_gpu.py --smoke      # tiny random config on the CPU: checks this script only

Speed does not need trained weights. Each chunk runs through the engine's own step code
(`streamer/chunk_steps.py`, which the batch runner serves with): `steps` batched denoise steps
with the re-noising sampler, then `decode` (the streamed VAE) and `commit` (the t = 0 pass into
the KV cache). Latents live on the CPU between calls, as in the engine's sessions.

- time to first chunk: a fresh stream (empty cache, fresh VAE cache), prompt already encoded,
  from its first denoise step to its decoded frames on the CPU; prompt encoding (UMT5-XXL
  shapes) is timed apart, since the engine encodes each distinct prompt once;
- steady state for 1, 2, 4, 8 batched streams: the KV window full and rolling, the VAE cache
  warm; aggregate and per-stream frames/s, seconds per chunk split into denoise, decode and
  commit;
- peak GPU memory overall and per batch size (KV pool and VAE caches included).

Anchors: Self-Forcing reports 17 fps for one stream on an H100; the goal here is >= 25 fps for
one stream on an H200, and more than 2x aggregate at 4 streams. Exit code 2 without CUDA.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from streamer.chunk_steps import denoise_step, finish_chunk  # noqa: E402
from streamer.hostinfo import cpu_name  # noqa: E402
from streamer.models.base import Conditioning  # noqa: E402
from streamer.models.device import synchronize  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
PROMPT = "a red fox running through fresh snow in a pine forest, golden hour, cinematic"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", default="1,2,4,8", help="batched stream counts (default 1,2,4,8)")
    p.add_argument("--chunks", type=int, default=4, help="timed chunks per stream count (default 4)")
    p.add_argument("--height", type=int, default=480)
    p.add_argument("--width", type=int, default=832)
    p.add_argument("--quick", action="store_true", help="streams 1 and 4, 2 timed chunks")
    p.add_argument("--text-encoder", choices=["umt5-xxl", "small"], default="umt5-xxl",
                   help="random UMT5 at UMT5-XXL shapes (5.7B, ~11 GB bf16) or a 2-layer one")  # fmt: skip
    p.add_argument("--smoke", action="store_true", help="tiny random config on the CPU (checks the script)")
    p.add_argument("--out", type=Path, help="JSON path (default results/wan_gpu.json; none for --smoke)")
    args = p.parse_args(argv)
    if args.quick:
        args.streams, args.chunks = "1,4", 2
    return args


def build(args: argparse.Namespace):
    """The model with random weights: real 1.3B shapes on CUDA, or the tiny config for --smoke."""
    from streamer.models.wan.config import CausalConfig
    from streamer.models.wan.tiny import (
        TINY_CAUSAL,
        TINY_TEXT,
        TINY_TRANSFORMER,
        TINY_VAE,
        UMT5_XXL,
        WAN_1_3B_TRANSFORMER,
        WAN_2_1_VAE,
        build_random,
    )

    max_batch = max(int(s) for s in args.streams.split(","))
    if args.smoke:
        cfg = dataclasses.replace(TINY_CAUSAL, max_batch=max_batch)
        return build_random(TINY_TRANSFORMER, TINY_VAE, TINY_TEXT, cfg, "cpu", torch.float32), "tiny"
    cfg = CausalConfig(height=args.height, width=args.width, max_batch=max_batch)
    small = dict(UMT5_XXL, num_layers=2, vocab_size=32128)
    text = UMT5_XXL if args.text_encoder == "umt5-xxl" else small
    try:
        return build_random(WAN_1_3B_TRANSFORMER, WAN_2_1_VAE, text, cfg, "cuda", torch.bfloat16), args.text_encoder
    except torch.cuda.OutOfMemoryError:
        if text is small:
            raise
        print("wan_gpu: UMT5-XXL did not fit; using a 2-layer UMT5 of the same width", file=sys.stderr)
        torch.cuda.empty_cache()
        return build_random(WAN_1_3B_TRANSFORMER, WAN_2_1_VAE, small, cfg, "cuda", torch.bfloat16), "small"


def text_only(spec, prompts) -> Conditioning:
    """Conditioning of one prompt per stream, no actions or controls (Wan takes text only)."""
    b, f = len(prompts), spec.frames_per_chunk
    return Conditioning(list(prompts), torch.zeros(b, f, dtype=torch.int64), torch.zeros(b, f, spec.control_dim))


class Timer:
    """Wall seconds with the model's device synchronised first (CUDA work is asynchronous)."""

    def __init__(self, device: torch.device):
        self.device = device

    def now(self) -> float:
        synchronize(self.device)
        return time.perf_counter()


class DecodeClock:
    """The model, with the clock read as each `decode` returns: `finish_chunk` decodes and commits
    in one call, and this benchmark reports the two apart."""

    def __init__(self, model, timer: Timer):
        self.model, self.timer, self.decoded_at = model, timer, 0.0

    def __getattr__(self, name: str):
        return getattr(self.model, name)

    def decode(self, x0: torch.Tensor) -> torch.Tensor:
        frames = self.model.decode(x0)
        self.decoded_at = self.timer.now()
        return frames


def run_chunk(model, pool, slots: list[int], prompts, gen: torch.Generator,
              timer: Timer) -> tuple[np.ndarray, dict[str, float]]:
    """One chunk for every slot through the engine's step code; returns its frames
    (B, F, H, W, 3) uint8 and the seconds of each phase."""
    spec, b = model.spec, len(slots)
    cond = text_only(spec, prompts)
    ts = spec.timesteps
    x = torch.randn(b, *spec.latent_shape, generator=gen)  # (B, F, C, h, w) on the CPU, like sessions
    start = timer.now()
    for i in range(len(ts)):
        x = denoise_step(model, pool, slots, x, [ts] * b, [i] * b, cond, "renoise",
                         lambda: torch.randn(b, *spec.latent_shape, generator=gen))  # fmt: skip
    denoised = timer.now()
    if None in model.streams_of(x):  # would decode as fresh streams (e.g. NaN latents): flag it
        print("wan_gpu: warning: decode did not find every stream's VAE cache", file=sys.stderr)
    clock = DecodeClock(model, timer)
    frames = finish_chunk(clock, pool, slots, x, cond)
    committed = timer.now()
    assert frames.shape[:2] == (b, spec.frames_per_chunk)
    return frames, {"denoise_s": denoised - start, "decode_s": clock.decoded_at - denoised,
                    "commit_s": committed - clock.decoded_at, "chunk_s": committed - start}  # fmt: skip


def fill_window(model, pool, slots: list[int], prompts, gen: torch.Generator) -> None:
    """Commit random chunks until every slot holds a full window (the steady state, as calibration does)."""
    spec, b = model.spec, len(slots)
    cond = text_only(spec, prompts)
    for _ in range((spec.sink_frames + spec.window_frames) // spec.frames_per_chunk):
        model.commit(torch.randn(b, *spec.latent_shape, generator=gen), cond, pool.batch(slots, commit=True))


def gib(n: float) -> float:
    return round(n / 2**30, 3)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cuda = torch.cuda.is_available() and not args.smoke
    if not cuda and not args.smoke:
        print("wan_gpu: no CUDA device; this benchmark needs a GPU (use --smoke to check the script on a CPU)",
              file=sys.stderr)  # fmt: skip
        return 2
    if cuda:
        torch.backends.cudnn.benchmark = True  # the VAE's 3-D convolutions, fixed shapes
    torch.set_grad_enabled(False)
    streams = [int(s) for s in args.streams.split(",")]

    start = time.perf_counter()
    model, text_encoder = build(args)
    build_s = time.perf_counter() - start
    timer = Timer(model.device)
    spec = model.spec
    pool = model.new_pool(max(streams))
    gen = torch.Generator().manual_seed(0)
    print(f"wan_gpu: built in {build_s:.1f}s; {spec.width}x{spec.height}, {spec.default_steps} steps, "
          f"{spec.frames_per_chunk} frames/chunk, KV pool {gib(pool.bytes_total)} GiB", flush=True)  # fmt: skip

    # Prompt encoding (once per distinct prompt in the engine), warmed.
    model.encode_prompt([PROMPT])
    t0 = timer.now()
    prompt = model.encode_prompt([PROMPT])[0]
    encode_s = timer.now() - t0

    # Time to first chunk: warm the kernels on one fresh stream, then time another fresh stream.
    for _ in range(2):
        slot = pool.allocate()
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        _, first = run_chunk(model, pool, [slot], [prompt], gen, timer)
        pool.release(slot)
    ttfc = first["chunk_s"]
    print(f"wan_gpu: prompt encode {encode_s * 1e3:.0f} ms, time to first chunk {ttfc:.3f}s "
          f"(denoise {first['denoise_s']:.3f}, decode {first['decode_s']:.3f}, commit {first['commit_s']:.3f})",
          flush=True)  # fmt: skip

    rows = []
    for b in streams:
        slots = [pool.allocate() for _ in range(b)]
        try:
            if cuda:
                torch.cuda.reset_peak_memory_stats()
            fill_window(model, pool, slots, [prompt] * b, gen)
            run_chunk(model, pool, slots, [prompt] * b, gen, timer)  # warms this batch size and the VAE caches
            phases = [run_chunk(model, pool, slots, [prompt] * b, gen, timer)[1] for _ in range(args.chunks)]
            mean = {k: sum(p[k] for p in phases) / len(phases) for k in phases[0]}
            fps = b * spec.frames_per_chunk / mean["chunk_s"]
            row = {"streams": b, **{k: round(v, 4) for k, v in mean.items()},
                   "denoise_step_s": round(mean["denoise_s"] / spec.default_steps, 4),
                   "fps_aggregate": round(fps, 2), "fps_per_stream": round(fps / b, 2),
                   "peak_memory_gib": gib(torch.cuda.max_memory_allocated()) if cuda else None}  # fmt: skip
        except torch.cuda.OutOfMemoryError as exc:
            row = {"streams": b, "error": f"out of memory: {exc}".splitlines()[0]}
            torch.cuda.empty_cache()
        finally:
            for s in slots:
                pool.release(s)
        rows.append(row)
        print(f"wan_gpu: {json.dumps(row)}", flush=True)

    by_b = {r["streams"]: r for r in rows if "error" not in r}
    one, four = by_b.get(1), by_b.get(4)
    result = {
        "benchmark": "wan_gpu",
        "gpu": torch.cuda.get_device_name(0) if cuda else f"none (--smoke on {cpu_name()})",
        "note": ("random weights at Wan2.1-T2V-1.3B shapes, bf16; speed only" if cuda
                 else "--smoke: tiny config on the CPU; numbers are meaningless"),  # fmt: skip
        "versions": _versions(),
        "config": {"width": spec.width, "height": spec.height, "steps": spec.default_steps,
                   "timesteps": list(spec.timesteps), "frames_per_chunk": spec.frames_per_chunk,
                   "latent_shape": list(spec.latent_shape), "sink_frames": spec.sink_frames,
                   "window_frames": spec.window_frames, "fps_target": spec.fps, "dtype": str(model.net.dtype),
                   "text_encoder": text_encoder, "timed_chunks": args.chunks},  # fmt: skip
        "build_s": round(build_s, 2),
        "prompt_encode_s": round(encode_s, 4),
        "time_to_first_chunk_s": round(ttfc, 4),
        "first_chunk": {k: round(v, 4) for k, v in first.items()},
        "streams": rows,
        "peak_memory_gib": gib(torch.cuda.max_memory_allocated()) if cuda else None,
        "kv_pool_gib": gib(pool.bytes_total),
        "anchors": {"self_forcing_h100_fps_1_stream": 17.0, "goal_fps_1_stream": 25.0, "goal_speedup_4_streams": 2.0},
        "goals": {
            "fps_1_stream_ge_25": None if one is None else one["fps_per_stream"] >= 25.0,
            "speedup_4_streams": None if one is None or four is None else round(
                four["fps_aggregate"] / one["fps_aggregate"], 2),
        },
    }
    out = args.out or (None if args.smoke else RESULTS / "wan_gpu.json")
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wan_gpu: wrote {out}")
    print(json.dumps({k: result[k] for k in ("gpu", "time_to_first_chunk_s", "goals", "peak_memory_gib")}))
    return 0


def _versions() -> dict[str, str]:
    import diffusers
    import transformers

    return {"torch": torch.__version__, "cuda": str(torch.version.cuda), "diffusers": diffusers.__version__,
            "transformers": transformers.__version__, "python": platform.python_version()}  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
