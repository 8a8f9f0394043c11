"""`benchmarks/motion.py`: the renderer's motions read right, a prompt whose two motions are
exchanged reads as swapped, every failure goes under one kind, and the whole run writes every
stage on a tiny model. Its figures on real weights are not tested."""

from __future__ import annotations

import dataclasses
import json

import torch

from benchmarks import motion
from benchmarks.shapes import rendered
from streamer.models.embedded.vocab import ObjectSpec, SceneSpec
from tests.models.test_causal_equivalence import tiny_model

# Two-object prompts whose two motions differ, and one-object ones, on plain and textured grounds.
SPECS = [
    SceneSpec("story", "grass", (ObjectSpec("red", "ball", "left"), ObjectSpec("blue", "square", "up"))),
    SceneSpec("story", "sand", (ObjectSpec("yellow", "triangle", "down"), ObjectSpec("purple", "ball", "still"))),
    SceneSpec("story", "sky", (ObjectSpec("green", "square", "right"), ObjectSpec("red", "triangle", "bounce"))),
    SceneSpec("story", "night", (ObjectSpec("pink", "ball", "bounce"),)),
    SceneSpec("story", "sea", (ObjectSpec("orange", "square", "still"),)),
]


def test_the_renderers_motions_read_right():
    reads = motion.motion_reads(rendered(SPECS, 24, 128, seed=0), SPECS)
    assert reads["all"]["objects"] == 8 and reads["all"]["accuracy"] == 1.0
    assert reads["2_object"]["objects"] == 6 and reads["1_object"]["objects"] == 2
    assert all(reads["all"][k] == 0 for k in motion.FAILURES)
    assert reads["bounce"]["read_as"] == {"bounce": 2}


def test_exchanged_motions_read_as_swapped():
    exchanged = [dataclasses.replace(s, objects=(dataclasses.replace(s.objects[0], motion=s.objects[1].motion),
                                                 dataclasses.replace(s.objects[1], motion=s.objects[0].motion)))
                 for s in SPECS[:3]]
    reads = motion.motion_reads(rendered(exchanged, 24, 128, seed=0), SPECS[:3])
    assert reads["all"]["swapped"] == 6 and reads["all"]["accuracy"] == 0.0


def test_each_failure_has_one_kind():
    assert motion.failure("left", "left", "up") is None
    assert motion.failure("left", None, "up") == "lost"
    assert motion.failure("left", "up", "up") == "swapped"
    assert motion.failure("left", "bounce", None) == "bounce"
    assert motion.failure("left", "bounce", "bounce") == "swapped"  # the other object's motion comes first
    assert motion.failure("still", "bounce", None) == "other"
    assert motion.failure("left", "right", "up") == "other"


def test_writes_every_stage_with_ratios_to_the_rendered_clips(tmp_path):
    tiny_model().save(tmp_path / "tiny")
    out = tmp_path / "motion.json"
    torch.manual_seed(0)
    motion.main(["--weights", str(tmp_path / "tiny"), "--clips", "3", "--chunks", "3", "--threads", "1",
                 "--out", str(out)])
    result = json.loads(out.read_text())
    assert list(result["stages"]) == ["rendered", "autoencoder", "dit_t1", "rollout"]
    assert result["frames_per_clip"] == 6
    rendered_row = result["stages"]["rendered"]
    for stage in result["stages"].values():
        assert set(stage) == set(rendered_row)
        for group, r in stage.items():
            if group != "ratios_vs_rendered":
                assert r["objects"] == rendered_row[group]["objects"]
                assert round(r["objects"] * r["accuracy"]) + sum(r[k] for k in motion.FAILURES) == r["objects"]
