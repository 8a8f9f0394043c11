"""What a wider or deeper DiT would cost to run, measured before anyone trains one.

Capacity is the quality lever that has paid (docs/model.md, "Where the model stands"), and the
frame rate is what it spends. Each shape `NAME=DIM:HEADS:DEPTH` is the shipped config with that
width, head count and depth and random weights (a pass costs the same whatever the weights),
beside the shipped autoencoder. For each batch size: frames/s of batched story rollouts (the
model's steps, commit and decode, as `streamer eval` times one stream), interleaved round by round
(benchmarks/timed_rollouts.py), and the ratio to the first shape, the baseline. Per shape: DiT
parameters, and the FLOPs of one stream's rollout per frame (torch's FlopCounterMode: matmuls
and attention), so a frame rate can be read against the work it buys.

    python benchmarks/dit_shapes.py                                  # -> benchmarks/results/dit_shapes.json
    python benchmarks/dit_shapes.py --shapes base=128:2:8 w192=192:3:8 --batches 1 --rounds 2
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, emit_result  # noqa: E402
from benchmarks.timed_rollouts import median_fps, timed_rollouts  # noqa: E402
from streamer.hostinfo import host_info  # noqa: E402
from streamer.models.embedded.config import ConfigError  # noqa: E402
from streamer.models.embedded.dit import CausalDiT  # noqa: E402
from streamer.models.embedded.model import EmbeddedModel  # noqa: E402
from streamer.models.embedded.rollout import rollout  # noqa: E402
from streamer.models.embedded.scripts import story_scripts  # noqa: E402

# The first teacher's shape (8 blocks; the default until session 37), the retired large size's
# depth, and wider ones at 64 per head: wide192d6 is the shipped default's (shallower, to hold the
# parameters up at less cost).
SHAPES = ("base=128:2:8", "deep12=128:2:12", "wide192=192:3:8", "wide192d6=192:3:6", "wide256=256:4:8")


def parse_shape(text: str) -> tuple[str, tuple[int, int, int]]:
    name, sep, dims = text.partition("=")
    parts = dims.split(":")
    if not sep or not name or len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"a shape is NAME=DIM:HEADS:DEPTH with positive integers, got {text!r}")
    dim, heads, depth = (int(p) for p in parts)
    if dim % heads or (dim // heads) % 2:
        raise argparse.ArgumentTypeError(f"{text!r}: DIM must split into HEADS heads of an even size (RoPE)")
    return name, (dim, heads, depth)


def shaped(shipped: EmbeddedModel, dim: int, heads: int, depth: int) -> EmbeddedModel:
    """The shipped model with a random DiT of this shape (its autoencoder and everything else kept)."""
    cfg = dataclasses.replace(shipped.cfg, dit=dataclasses.replace(shipped.cfg.dit, dim=dim, heads=heads, depth=depth))
    torch.manual_seed(0)
    return EmbeddedModel(cfg, ae=shipped.ae, dit=CausalDiT(cfg.dit))


def flops_per_frame(model: EmbeddedModel, chunks: int) -> float:
    f = model.spec.frames_per_chunk
    scripts, _ = story_scripts(np.random.default_rng(0), 1, chunks, f)
    with FlopCounterMode(display=False) as counter:
        rollout(model, scripts)
    return counter.get_total_flops() / (chunks * f)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", type=parse_shape, nargs="+", default=[parse_shape(s) for s in SHAPES],
                    metavar="NAME=DIM:HEADS:DEPTH", help=f"the first is the baseline (default: {' '.join(SHAPES)})")
    ap.add_argument("--batches", type=int, nargs="*", default=[1, 8])
    ap.add_argument("--chunks", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--weights", type=Path, default=None, help="whose config and autoencoder (default: the shipped)")
    ap.add_argument("--out", type=Path, default=RESULTS / "dit_shapes.json")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    names = [name for name, _ in args.shapes]
    if len(set(names)) != len(names):
        ap.error("each shape needs its own NAME")
    try:
        shipped = EmbeddedModel.load(args.weights)
    except ConfigError as exc:
        print(f"benchmarks/dit_shapes.py: {exc}", file=sys.stderr)
        return 2
    models = {name: shaped(shipped, *dims) for name, dims in args.shapes}
    shapes = {name: {"dim": d, "heads": h, "depth": n, "dit_params": sum(p.numel() for p in models[name].dit.parameters()),
                     "gflop_per_frame": flops_per_frame(models[name], args.chunks) / 1e9}
              for name, (d, h, n) in args.shapes}  # fmt: skip
    base = names[0]
    rows = []
    for batch in args.batches:
        fps, _ = timed_rollouts(models, batch, args.chunks, args.rounds)
        med = median_fps(fps)
        rows.append({"batch": batch, **{f"{n}_frames_per_s": v for n, v in med.items()},
                     **{f"{n}_ratio": med[n] / med[base] for n in names[1:]}, "rounds_frames_per_s": fps})
        print({k: round(v, 2) for k, v in rows[-1].items() if isinstance(v, float)}, file=sys.stderr)
    out = {"baseline": base, "shapes": shapes, "batches": rows, "chunks": args.chunks, "rounds": args.rounds,
           "steps": len(shipped.spec.timesteps), "threads": torch.get_num_threads(),
           "host": host_info(torch.device("cpu"))}  # fmt: skip
    emit_result(out, args.out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
