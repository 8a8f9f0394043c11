"""The demo page against `streamer serve` with the shipped embedded model: what the user sees.

A redirect typed into the prompt box changes the background within a few chunks, and holding
an arrow key on the video moves the game character that way. Pixels are read back from the
page (`streamerDemo.readFrame()`), so the whole path is tested: page -> server -> model ->
encoder -> browser decoder -> screen. Palette colours come from the model's world
(`streamer/models/embedded/`), the same ones the model was trained to draw.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from streamer.models.embedded.scenery import BACKGROUND_BASE
from streamer.models.embedded.vocab import COLORS
from tests.browser.helpers import (
    assert_valid_messages,
    centroid,
    colour_mask,
    read_frame,
    save_screenshot,
    start_stream,
    stop_stream,
    wait_frames,
)

pytestmark = pytest.mark.browser

REDIRECT_CHUNKS = 10  # "within a few chunks" of the one the ack names
MOVE_CHUNKS = 12  # how long a key is held at most
BACKGROUND_TOL = 60.0  # Euclidean RGB distance of the frame's median colour to a background's
CHARACTER_TOL = 90.0
GUARD_S = 60.0  # bounds a hang only


def dominant(frame: np.ndarray) -> np.ndarray:
    """Per-channel median: the background's colour when an object covers a minority of pixels."""
    return np.median(frame.reshape(-1, 3), axis=0)


def distance(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a, np.float32) - np.asarray(b, np.float32)))


def wait_for_frame(page, predicate, until_chunk: int | None = None):
    """Read frames until `predicate(frame)` holds; returns (frame, chunk index when seen).

    Stops (returning the last frame) once the stream is past `until_chunk`.
    """
    deadline = time.monotonic() + GUARD_S
    while True:
        wait_frames(page, 1)
        chunk = page.evaluate("streamerDemo.stats.lastChunkIndex")
        frame = read_frame(page)
        if predicate(frame) or (until_chunk is not None and chunk > until_chunk):
            return frame, chunk
        assert time.monotonic() < deadline, "no frame came that matched (hang guard)"


def ack_of_last(page, type_: str) -> dict:
    """The server's answer to the last `type_` message the page sent (matched by its id)."""
    msg_id = page.evaluate(f"streamerDemo.sent.filter(m => m.type === '{type_}').at(-1).id")
    page.wait_for_function(f"streamerDemo.events.some(e => e.id === {msg_id})")
    (answer,) = [e for e in page.evaluate("streamerDemo.events") if e.get("id") == msg_id]
    assert answer["type"] == type_, f"the server answered {answer}"
    return answer


def test_typed_redirect_changes_the_background(model_server, open_page, artifacts):
    sand, night = BACKGROUND_BASE["sand"], BACKGROUND_BASE["night"]
    page = open_page(model_server)
    session = start_stream(page, "webrtc", scene="story", prompt="a red ball moving right on sand")
    frame, _ = wait_for_frame(page, lambda f: distance(dominant(f), sand) < BACKGROUND_TOL)
    assert distance(dominant(frame), sand) < BACKGROUND_TOL, f"not sand: {dominant(frame)}"

    page.fill("#prompt", "a red ball moving right on night")
    page.press("#prompt", "Enter")
    ack = ack_of_last(page, "prompt")
    assert ack["unknown_words"] == []
    until = ack["applies_from_chunk"] + REDIRECT_CHUNKS
    frame, chunk = wait_for_frame(page, lambda f: distance(dominant(f), night) < BACKGROUND_TOL, until)
    save_screenshot(page, artifacts, "redirect_night")
    assert distance(dominant(frame), night) < BACKGROUND_TOL, (
        f"background still {dominant(frame)} at chunk {chunk}, {REDIRECT_CHUNKS} chunks after the redirect"
    )
    # The same stream: no restart, one admission.
    assert page.evaluate("streamerDemo.session.session_id") == session["session_id"]
    assert [e["type"] for e in page.evaluate("streamerDemo.events")].count("admitted") == 1

    page.fill("#prompt", "a red ball moving right on sand zorblax")
    page.press("#prompt", "Enter")
    page.wait_for_function("streamerDemo.unknownWords.includes('zorblax')")
    assert "zorblax" in page.inner_text("#unknown")
    stop_stream(page)
    assert_valid_messages(page)


def _hold_until_moved(page, key: str, start: tuple[float, float], sign: int, min_move: float):
    """Hold `key` on the video until the character's x moved `min_move` px by `sign`."""
    red = COLORS["red"]
    page.keyboard.down(key)
    try:
        ack = ack_of_last(page, "action")
        until = ack["applies_from_chunk"] + MOVE_CHUNKS

        def moved(f: np.ndarray) -> bool:
            c = centroid(colour_mask(f, red, CHARACTER_TOL))
            return c is not None and sign * (c[0] - start[0]) >= min_move

        frame, _ = wait_for_frame(page, moved, until)
    finally:
        page.keyboard.up(key)
    return centroid(colour_mask(frame, red, CHARACTER_TOL))


# Not every session of the shipped model draws its game character: with this prompt 6 of 64
# clips drew none in 20 frames (docs/model.md, Step distillation). The model's rate of that is
# measured by `streamer eval` and benchmarks/guidance.py ("character found"); this test is about
# the key's path, so it opens a seed whose character shows.
ARROW_TEST_SEED = 0


def test_holding_an_arrow_key_moves_the_character(model_server, open_page, artifacts):
    page = open_page(model_server)
    session = start_stream(page, "webrtc", scene="game", prompt="game: a red character on sand", seed=ARROW_TEST_SEED)
    page.focus("#viewport")
    width = session["width"]
    min_move = 0.08 * width
    red = COLORS["red"]
    frame, _ = wait_for_frame(page, lambda f: centroid(colour_mask(f, red, CHARACTER_TOL)) is not None)
    start = centroid(colour_mask(frame, red, CHARACTER_TOL))
    assert start is not None, "no red character on screen"

    # Towards the far side first (the arena's wall stops it), then back.
    first = ("ArrowRight", 1) if start[0] < width / 2 else ("ArrowLeft", -1)
    second = ("ArrowLeft", -1) if first[1] == 1 else ("ArrowRight", 1)
    for key, sign in (first, second):
        end = _hold_until_moved(page, key, start, sign, min_move)
        assert end is not None, f"the character vanished while holding {key}"
        dx, dy = end[0] - start[0], end[1] - start[1]
        assert sign * dx >= min_move, f"{key}: moved {dx:+.1f} px (want {sign * min_move:+.1f}) from {start}"
        assert abs(dx) > abs(dy), f"{key}: moved ({dx:+.1f}, {dy:+.1f}), not mostly sideways"
        save_screenshot(page, artifacts, f"game_{key}")
        start = end
    assert_valid_messages(page)


def test_screenshot_and_first_frames_with_the_model(model_server, open_page, artifacts, measurements):
    for transport in ("ws", "webrtc"):
        page = open_page(model_server)
        session = start_stream(page, transport, scene="game")
        page.focus("#viewport")
        wait_frames(page, 24)
        page.wait_for_function("streamerDemo.stats.latencyP50Ms !== null")
        stats = page.evaluate("streamerDemo.stats")
        keys = ("timeToAdmittedMs", "timeToFirstFrameMs", "latencyP50Ms", "fps", "jitterBufferMsPerFrame")
        measurements[f"{transport}_model"] = {k: stats[k] for k in keys} | {
            "codec": session["codec"],
            "size": [session["width"], session["height"]],
        }
        if transport == "webrtc":
            page.keyboard.down("ArrowRight")
            wait_frames(page, 12)
            page.keyboard.up("ArrowRight")
            save_screenshot(page, artifacts, "page_model", docs=True)
        stop_stream(page)
        assert_valid_messages(page)
