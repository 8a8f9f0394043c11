"""Behaviour tests of the pixel evaluator against the ground-truth renderer."""

from __future__ import annotations

import numpy as np
import pytest

from streamer.models.embedded.evaluate import (
    background_of,
    character_centroid,
    find_objects,
    mouth_opening,
    score_story,
    self_check,
)
from streamer.models.embedded.vocab import BACKGROUNDS, COLORS, SHAPES, ObjectSpec, SceneSpec
from streamer.models.embedded.world import World


def test_every_colour_and_shape_is_read_on_every_background() -> None:
    rng = np.random.default_rng(0)
    for bg in BACKGROUNDS:
        for i, color in enumerate(COLORS):
            shape = SHAPES[i % len(SHAPES)]
            world = World(SceneSpec("story", bg, (ObjectSpec(color, shape, "still"),)), rng)
            frame = world.step()
            assert background_of(frame) == bg
            found = find_objects(frame, bg)
            assert [(d.color, d.shape) for d in found] == [(color, shape)], (bg, color, shape)
            assert np.hypot(*(np.array(found[0].centre) - world.state.objects[0])) < 6  # a triangle's centroid sits h/3 low


def test_all_shapes_are_told_apart() -> None:
    rng = np.random.default_rng(1)
    for shape in SHAPES:
        for _ in range(5):
            world = World(SceneSpec("story", "grass", (ObjectSpec("pink", shape, "still"),)), rng)
            assert find_objects(world.step(), "grass")[0].shape == shape


def test_object_split_by_an_edge_is_one_detection() -> None:
    rng = np.random.default_rng(2)
    world = World(SceneSpec("story", "sea", (ObjectSpec("orange", "square", "right"),)), rng)
    while True:  # run until the square straddles the right edge
        frame = world.step()
        x = world.state.objects[0][0]
        if x > 124 or x < 4:
            break
    found = find_objects(frame, "sea")
    assert len(found) == 1 and found[0].shape == "square"
    dx = (found[0].centre[0] - x + 64) % 128 - 64
    assert abs(dx) < 2


def test_score_story_reads_motion() -> None:
    rng = np.random.default_rng(3)
    for motion in ("left", "right", "up", "down", "still", "bounce"):
        spec = SceneSpec("story", "night", (ObjectSpec("yellow", "triangle", motion),))
        world = World(spec, rng)
        frames = np.stack([world.step() for _ in range(16)])
        scores = score_story(frames, spec)
        assert scores["adherence"] == 1.0 and scores["motion"] == 1.0 and scores["colour"] == 1.0, motion
        wrong = SceneSpec("story", "night", (ObjectSpec("blue", "triangle", motion),))
        assert score_story(frames, wrong)["adherence"] == 0.0 and score_story(frames, wrong)["colour"] == 0.0
        # The right colour in the wrong shape: colour seen, adherence not.
        other_shape = SceneSpec("story", "night", (ObjectSpec("yellow", "square", motion),))
        assert score_story(frames, other_shape)["colour"] == 1.0
        assert score_story(frames, other_shape)["shape_and_colour"] == 0.0


def test_character_centroid_tracks_the_character() -> None:
    rng = np.random.default_rng(4)
    world = World(SceneSpec("game", "sand", character_color="purple"), rng)
    for action in (1, 1, 4, 4, 2, 0, 3):
        frame = world.step(action)
        found = character_centroid(frame, "purple")
        assert found is not None
        assert np.hypot(*(np.array(found) - world.state.character)) < 1.5
    assert character_centroid(frame, "green") is None


def test_mouth_opening_is_linear_in_control() -> None:
    rng = np.random.default_rng(5)
    spec = SceneSpec("avatar", "black", skin="brown", hair="red")
    world = World(spec, rng)
    for m in np.linspace(0, 1, 9):
        assert mouth_opening(world.step(control=(float(m), 1.0)), spec) == pytest.approx(m, abs=0.08)


def test_self_check_separates_real_from_scrambled() -> None:
    figures = self_check(np.random.default_rng(6), n_clips=3, size=64)
    assert figures["story_adherence"] >= 0.95 and figures["story_motion"] >= 0.95
    assert figures["game_move"] >= 0.95 and figures["game_stand"] >= 0.95
    assert figures["avatar_mouth_corr"] > 0.95
    assert figures["scrambled_story_adherence"] < 0.3
    assert figures["scrambled_game_move"] < 0.6
    assert abs(figures["scrambled_avatar_mouth_corr"]) < 0.5
