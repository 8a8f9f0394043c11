"""`benchmarks/shapes.py`: its stages are what they say (the reader reads the renderer's shapes,
blur softens without moving colour, teacher forcing at t = 0 is the autoencoder's round trip)
and the whole run writes every stage on a tiny model. Its figures on real weights are not tested."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import torch

from benchmarks import shapes
from streamer.models.embedded.scripts import story_scripts
from streamer.models.embedded.vocab import SHAPES
from tests.models.test_causal_equivalence import tiny_model


def test_the_reader_reads_the_renderers_shapes_and_a_wrong_shape_is_never_right():
    _, specs = story_scripts(np.random.default_rng(3), 6, 2, 2)
    clips = shapes.rendered(specs, 4, 128, seed=0)
    reads = shapes.shape_reads(clips, specs)
    assert reads["all"]["object_frames"] == 4 * sum(len(s.objects) for s in specs)
    assert reads["all"]["shape_and_colour"] > 0.9

    other = {s: SHAPES[(SHAPES.index(s) + 1) % len(SHAPES)] for s in SHAPES}
    wrong = [dataclasses.replace(s, objects=tuple(dataclasses.replace(o, shape=other[o.shape]) for o in s.objects))
             for s in specs]
    misread = shapes.shape_reads(clips, wrong)["all"]
    assert misread["colour"] == reads["all"]["colour"] and misread["shape_and_colour"] < 0.1


def test_binding_counts_a_swapped_pair_as_the_other_objects_shape():
    _, specs = story_scripts(np.random.default_rng(3), 12, 2, 2, two_objects=1.0)
    specs = [s for s in specs if s.objects[0].shape != s.objects[1].shape]
    assert specs and all(len(s.objects) == 2 for s in specs)
    clips = shapes.rendered(specs, 4, 128, seed=0)
    assert shapes.binding_reads(clips, specs)["own_shape"] > 0.9
    # The same clips read against prompts whose two shapes are swapped: the renderer drew each
    # colour with the other object's shape.
    swapped = [dataclasses.replace(s, objects=tuple(dataclasses.replace(o, shape=other.shape)
                                                    for o, other in zip(s.objects, s.objects[::-1], strict=True)))
               for s in specs]
    reads = shapes.binding_reads(clips, swapped)
    assert reads["other_shape"] > 0.9 and reads["object_frames"] == 4 * 2 * len(specs)
    assert shapes.binding_reads(clips[:0], specs[:0]) == {"object_frames": 0, "own_shape": None, "other_shape": None,
                                                          "third_shape": None, "unseen": None}


def test_blur_softens_edges_but_keeps_flat_regions_and_wraps():
    clip = np.zeros((1, 1, 32, 32, 3), np.uint8)
    clip[..., 10:20, 0:6, :] = 200  # a block on the left edge: the blur wraps it to the right one
    soft = shapes.blurred(clip, 2.0).astype(float)
    assert soft[0, 0, 15, 31, 0] > 0 and 0 < soft[0, 0, 10, 3, 0] < 200
    assert abs(soft.sum() - clip.astype(float).sum()) / clip.sum() < 0.01
    flat = np.full((1, 2, 16, 16, 3), 77, np.uint8)
    assert np.array_equal(shapes.blurred(flat, 1.5), flat)


def test_teacher_forcing_from_t0_is_the_autoencoders_round_trip():
    model = tiny_model()
    scripts, specs = story_scripts(np.random.default_rng(0), 2, 3, model.spec.frames_per_chunk)
    z = shapes.latents(model, shapes.rendered(specs, scripts[0].frames, model.spec.height, seed=0))
    forced = shapes.teacher_forced(model, scripts, z, 0.0, 4, seed=0)
    np.testing.assert_array_equal(forced, model.decode(z).numpy())
    noisy = shapes.teacher_forced(model, scripts, z, 1.0, 4, seed=0)
    assert noisy.shape == forced.shape and not np.array_equal(noisy, forced)


def test_writes_every_stage_with_ratios_to_the_rendered_frames(tmp_path):
    tiny_model().save(tmp_path / "tiny")
    out = tmp_path / "shapes.json"
    torch.manual_seed(0)
    shapes.main(["--weights", str(tmp_path / "tiny"), "--clips", "2", "--chunks", "2", "--threads", "1",
                 "--out", str(out)])
    result = json.loads(out.read_text())
    assert list(result["stages"]) == ["rendered", "blur1.5", "blur2", "autoencoder", "dit_t0.5", "dit_t1", "rollout"]
    assert result["frames_per_clip"] == 4 and result["steps"] == 4
    rendered = result["stages"]["rendered"]
    assert all(v in (1.0, None) for v in rendered["ratios_vs_rendered"].values())
    assert set(result["stages"]["rollout"]) == set(rendered)
    assert set(rendered["binding"]) == {"object_frames", "own_shape", "other_shape", "third_shape", "unseen"}
