"""Sample sheets: short rollouts of the embedded model as one PNG, to look at while it trains.

One clip a row (stories, a game whose held key changes every few chunks, a talking avatar),
every `every`-th frame across, the row's prompt written above it. Training writes one to
`<run-dir>/samples/` at every checkpoint; standalone:

    python -m streamer.models.embedded.samples --out sheet.png [--weights DIR] [--guidance S]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from ...argtypes import add_guidance_arguments, positive_int
from .model import EmbeddedModel
from .rollout import rollout
from .scripts import avatar_scripts, game_scripts, story_scripts

LABEL = 12  # pixels of text above each row


def sample_sheet(model: EmbeddedModel, seed: int = 0, stories: int = 3, chunks: int = 8, every: int = 2) -> Image.Image:
    rng = np.random.default_rng(seed)
    f = model.spec.frames_per_chunk
    scripts = story_scripts(rng, stories, chunks, f)[0] + game_scripts(rng, 1, chunks, f)[0]
    scripts += avatar_scripts(rng, 1, chunks, f)[0]
    frames = rollout(model, scripts, seed=seed).frames[:, ::every]  # (rows, cols, H, W, 3)
    rows, cols, h, w = frames.shape[:4]
    sheet = Image.new("RGB", (cols * w, rows * (h + LABEL)), "white")
    draw = ImageDraw.Draw(sheet)
    for r, (clip, script) in enumerate(zip(frames, scripts, strict=True)):
        y = r * (h + LABEL)
        keys = "" if not script.actions.any() else "  keys " + "".join("-<>^v"[a] for a in script.actions[::f])
        draw.text((2, y), script.prompts[0] + keys, fill="black")
        for c in range(cols):
            sheet.paste(Image.fromarray(clip[c]), (c * w, y + LABEL))
    return sheet


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", type=Path, default=None, help="weights dir (default: the shipped ones)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--chunks", type=positive_int, default=8)
    add_guidance_arguments(ap)
    args = ap.parse_args(argv)
    model = EmbeddedModel.load(args.weights)
    model.configure_guidance(args.guidance, args.guidance_min_t)
    sample_sheet(model, args.seed, chunks=args.chunks).save(args.out)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
