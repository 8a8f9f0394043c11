"""Where the embedded model loses motion: how each prompted motion reads back from rollouts,
one- and two-object prompts apart, with every failure put under the way it failed.

`streamer eval`'s motion figure is one fraction of clips. This reads every object's track with
the evaluator's own reader (`evaluate.read_objects`, `object_tracks`, `classify_motion`) in story
clips (their prompts drawn as the evaluator draws them) at three stages, as benchmarks/shapes.py
does for shapes:

    rendered      the renderer's clips: the baseline of the ratios (every motion should read right)
    autoencoder   the clips encoded and decoded
    dit_t1        every chunk made from pure noise after the clip's real past (teacher forcing):
                  can the model continue a motion it is shown?
    rollout       the model's own rollout of the prompts (what `streamer eval` scores): the same,
                  after its own past

A wrong read is counted under the first of these that fits it:

    lost      the object's colour is found too seldom for a track (`classify_motion` gives None)
    swapped   two objects, and the object moves as the prompt says the other one does: the
              prompt's motions bound to the wrong objects
    bounce    a straight motion (left, right, up, down) read as bounce: the track wobbles across
              its direction by more than half its speed along it
    other     any other wrong motion

Per group (all objects, one- and two-object prompts, each prompted motion): `objects`,
`accuracy`, the four failure counts, and `read_as` (how often each motion was read).

    python benchmarks/motion.py [--weights DIR] [--guidance 2 --steps 8] -> benchmarks/results/motion.json

About a minute for a student on 2 cores, 3 for a guided teacher at 8 steps.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS  # noqa: E402
from benchmarks.shapes import emit_story_bench, story_bench, teacher_forced  # noqa: E402
from streamer.models.embedded.evaluate import classify_motion, object_tracks, read_objects  # noqa: E402
from streamer.models.embedded.rollout import rollout  # noqa: E402
from streamer.models.embedded.vocab import MOTIONS, SceneSpec  # noqa: E402

FAILURES = ("lost", "swapped", "bounce", "other")
STRAIGHT = ("left", "right", "up", "down")


def failure(prompted: str, read: str | None, other: str | None) -> str | None:
    """The kind of a read's failure (FAILURES), None when it reads right; `other` is the other
    object's prompted motion in a two-object prompt."""
    if read == prompted:
        return None
    if read is None:
        return "lost"
    if read == other:
        return "swapped"
    if read == "bounce" and prompted in STRAIGHT:
        return "bounce"
    return "other"


def motion_reads(clips: np.ndarray, specs: list[SceneSpec]) -> dict:
    """Clips (B, T, H, W, 3) read against their prompts' motions -> per group: objects,
    accuracy, the failure counts, read_as."""
    groups: dict[str, Counter] = {}
    size = clips.shape[2]
    for frames, spec in zip(clips, specs, strict=True):
        tracks = object_tracks([read_objects(frame, spec) for frame in frames])
        for i, (obj, track) in enumerate(zip(spec.objects, tracks, strict=True)):
            read = classify_motion(track, size)
            other = spec.objects[1 - i].motion if len(spec.objects) == 2 else None
            kind = failure(obj.motion, read, other)
            for group in ("all", f"{len(spec.objects)}_object", obj.motion):
                c = groups.setdefault(group, Counter())
                c["objects"] += 1
                c["right"] += kind is None
                if kind is not None:
                    c[kind] += 1
                c[f"read:{read}"] += 1
    order = ["all", "1_object", "2_object", *MOTIONS]
    return {g: {"objects": c["objects"], "accuracy": c["right"] / c["objects"],
                **{k: c[k] for k in FAILURES},
                "read_as": {k[5:]: n for k, n in sorted(c.items()) if k.startswith("read:")}}
            for g, c in sorted(groups.items(), key=lambda kv: order.index(kv[0]))}


def main(argv: list[str] | None = None) -> int:
    bench = story_bench(argv, __doc__ or "", 48, RESULTS / "motion.json")
    model, scripts, z, steps, seed = bench.model, bench.scripts, bench.z, bench.steps, bench.args.seed
    stages = {name: motion_reads(clips, bench.specs) for name, clips in (
        ("rendered", bench.real), ("autoencoder", model.decode(z).numpy()),
        ("dit_t1", teacher_forced(model, scripts, z, 1.0, steps, seed)),
        ("rollout", rollout(model, scripts, steps, seed).frames))}
    base = stages["rendered"]
    for name, row in stages.items():
        row["ratios_vs_rendered"] = {g: r["accuracy"] / base[g]["accuracy"] if base[g]["accuracy"] else None
                                     for g, r in row.items()}
        print(f"{name:>11} " + " ".join(f"{g} {r['accuracy']:.2f}" for g, r in row.items() if g != "ratios_vs_rendered")
              + "  failures " + " ".join(f"{k} {row['all'][k]}" for k in FAILURES), file=sys.stderr)
    emit_story_bench(bench, stages)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
