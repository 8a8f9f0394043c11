"""Driving the demo page and reading its pixels back (through `window.streamerDemo`)."""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from streamer.protocol import StartMessage, parse_control

if TYPE_CHECKING:  # the suite is skipped, not broken, without playwright
    from playwright.sync_api import Page

ROOT = Path(__file__).resolve().parents[2]
LIVE = ("connecting", "admitted")


def start_stream(
    page: Page, transport: str = "webrtc", scene: str | None = None, prompt: str | None = None,
    seed: int | None = None,
) -> dict:
    """Pick the transport (and a preset, prompt and/or seed), click Start, wait for `admitted`."""
    page.check(f'input[name="transport"][value="{transport}"]')
    if scene is not None:
        page.click(f'[data-scene="{scene}"]')
    if prompt is not None:
        page.fill("#prompt", prompt)
    if seed is not None:  # in the "Advanced" box, opened first as a user would
        page.click("details:has(#seed) > summary")
        page.fill("#seed", str(seed))
    page.click("#start")
    page.wait_for_function("streamerDemo.state !== 'connecting' && streamerDemo.state !== 'idle'")
    state = page.evaluate("[streamerDemo.state, streamerDemo.reason]")
    assert state[0] == "admitted", f"stream not admitted: {state}"
    return page.evaluate("streamerDemo.session")


def wait_frames(page: Page, n: int) -> None:
    """Until the page has displayed `n` more frames than now."""
    seen = page.evaluate("streamerDemo.stats.framesShown")
    page.wait_for_function(f"streamerDemo.stats.framesShown >= {seen + n}")


def stop_stream(page: Page) -> str:
    page.click("#stop")
    page.wait_for_function("streamerDemo.state === 'ended'")
    return page.evaluate("streamerDemo.reason")


def read_frame(page: Page) -> np.ndarray:
    """The frame on screen, (H, W, 3) uint8 at the stream's size."""
    page.wait_for_function("streamerDemo.readFrame() !== null")
    f = page.evaluate("streamerDemo.readFrame()")
    rgb = np.frombuffer(base64.b64decode(f["rgb"]), np.uint8)
    return rgb.reshape(f["height"], f["width"], 3)


def colour_mask(frame: np.ndarray, rgb: tuple[int, int, int], tol: float) -> np.ndarray:
    """Pixels within `tol` (Euclidean, 0..441) of `rgb`: codecs shift colours a little."""
    d = frame.astype(np.float32) - np.array(rgb, np.float32)
    return np.sqrt((d * d).sum(-1)) <= tol


def centroid(mask: np.ndarray) -> tuple[float, float] | None:
    """(x, y) of the mask's pixels, or None when there are too few to trust."""
    ys, xs = np.nonzero(mask)
    if len(xs) < max(4, mask.size // 2000):
        return None
    return float(xs.mean()), float(ys.mean())


def assert_valid_messages(page: Page) -> int:
    """Every message the page sent parses under the server's own protocol models."""
    sent = page.evaluate("streamerDemo.sent")
    for msg in sent:
        parse_control(json.dumps(msg))  # raises ProtocolError naming the field
    for start in page.evaluate("streamerDemo.offers"):
        StartMessage.model_validate(start, strict=True)
    errors = [e for e in page.evaluate("streamerDemo.events") if e["type"] == "error"]
    assert not errors, f"the server rejected messages: {errors}"
    return len(sent)


def save_screenshot(page: Page, artifacts: Path, name: str, docs: bool = False) -> Path:
    """Screenshot to the artifacts dir; with `docs` and STREAMER_UPDATE_SCREENSHOT=1, to docs/ too."""
    path = artifacts / f"{name}.png"
    page.screenshot(path=str(path))
    if docs and os.environ.get("STREAMER_UPDATE_SCREENSHOT") == "1":
        shutil.copyfile(path, ROOT / "docs" / "screenshot.png")
    return path
