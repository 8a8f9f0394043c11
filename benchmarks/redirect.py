"""Redirect benchmark: which transition gives the faster and cleaner redirect?

Runs real engine sessions (the shipped embedded model), switches each story's object colour
mid-stream with `cut`, `blend` or `recache`, and scores the frames after the switch from
pixels: chunks until the new colour shows (speed), the share of post-switch frames that show
exactly one object of the right shape in either colour (clean: no vanishing or doubled object),
and the share that adhere to the new prompt after the transition settles.

    python benchmarks/redirect.py [--trials 8] [--json]     -> benchmarks/results/redirect.json
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, emit_result  # noqa: E402
from streamer.engine import Engine, EngineConfig  # noqa: E402
from streamer.events import Chunk  # noqa: E402
from streamer.models.embedded import evaluate as ev  # noqa: E402
from streamer.models.embedded import vocab  # noqa: E402
from streamer.models.embedded.model import EmbeddedModel  # noqa: E402
from streamer.protocol import PromptMessage, StartMessage  # noqa: E402

BEFORE, AFTER = 4, 6  # chunks before the switch, chunks scored after it


class Sink:
    def __init__(self) -> None:
        self.chunks: list[Chunk] = []
        self.event = asyncio.Event()

    def on_chunk(self, chunk: Chunk) -> None:
        self.chunks.append(chunk)
        self.event.set()

    def on_event(self, event: dict) -> None:
        self.event.set()

    async def wait(self, n: int) -> None:
        while len(self.chunks) < n:
            self.event.clear()
            await asyncio.wait_for(self.event.wait(), 60)


def pair(rng: np.random.Generator) -> tuple[vocab.SceneSpec, vocab.SceneSpec]:
    a = vocab.random_spec(rng, "story")
    a = vocab.SceneSpec("story", a.background, a.objects[:1])
    colours = [c for c in vocab.COLORS if c != a.objects[0].color]
    obj = a.objects[0]
    b = vocab.SceneSpec("story", a.background, (vocab.ObjectSpec(str(rng.choice(colours)), obj.shape, obj.motion),))
    return a, b


async def trial(model: EmbeddedModel, transition: str, a: vocab.SceneSpec, b: vocab.SceneSpec, seed: int) -> dict:
    engine = Engine(model, EngineConfig(max_sessions=1, degrade=False))  # fps: what this machine holds
    await engine.start()
    try:
        sink = Sink()
        h = await engine.open_session(StartMessage(prompt=vocab.describe(a), seed=seed), sink)
        await sink.wait(BEFORE)
        ack = await engine.control(h.id, PromptMessage(prompt=vocab.describe(b), transition=transition))
        first = ack["applies_from_chunk"]
        await sink.wait(first + AFTER)
    finally:
        await engine.stop()
    post = [c for c in sink.chunks if first <= c.chunk_index < first + AFTER]
    frames = np.concatenate([c.frames for c in post])
    f = post[0].frames.shape[0]
    new = b.objects[0].color
    found = [ev.find_objects(x, b.background) for x in frames]
    hit = [any(d.color == new for d in fs) for fs in found]
    first_hit = next((i for i, h in enumerate(hit) if h), None)
    single = [sum(d.shape == b.objects[0].shape for d in fs) == 1 for fs in found]
    settled = frames[3 * f :]
    return {
        "chunks_to_new_colour": None if first_hit is None else first_hit // f + 1,
        "clean": float(np.mean(single)),
        "adherence_after": ev.score_story(settled, b)["adherence"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trials", type=int, default=8)
    ap.add_argument("--weights", type=Path, default=None)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, default=RESULTS / "redirect.json")
    args = ap.parse_args()
    model = EmbeddedModel.load(args.weights)
    rng = np.random.default_rng(0)
    pairs = [pair(rng) for _ in range(args.trials)]
    out: dict = {"trials": args.trials, "transitions": {}}
    for transition in ("cut", "blend", "recache"):
        rows = [asyncio.run(trial(model, transition, a, b, seed)) for seed, (a, b) in enumerate(pairs)]
        waits = [r["chunks_to_new_colour"] if r["chunks_to_new_colour"] is not None else AFTER + 1 for r in rows]
        out["transitions"][transition] = {
            "chunks_to_new_colour_p50": float(np.percentile(waits, 50)),
            "chunks_to_new_colour_p90": float(np.percentile(waits, 90)),
            "within_2_chunks": float(np.mean([w <= 2 for w in waits])),
            "clean": float(np.mean([r["clean"] for r in rows])),
            "adherence_after": float(np.mean([r["adherence_after"] for r in rows])),
        }
        print(transition, out["transitions"][transition], file=sys.stderr)
    emit_result(out, args.out, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
