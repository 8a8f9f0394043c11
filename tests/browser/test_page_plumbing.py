"""The demo page against `streamer serve --config tiny-random`: frames over both transports,
admission refusal, and the live inputs (keys, avatar slider, microphone) as protocol messages.

The tiny random model draws meaningless pixels fast, so these tests check the plumbing, not
what the pictures show (test_page_model.py does that with the shipped model).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.browser.helpers import (
    assert_valid_messages,
    read_frame,
    save_screenshot,
    start_stream,
    stop_stream,
    wait_frames,
)

pytestmark = pytest.mark.browser


def test_webrtc_frames_are_decoded(tiny_server, open_page, artifacts, measurements):
    page = open_page(tiny_server)
    session = start_stream(page, "webrtc")
    assert session["codec"] in ("h264", "vp8") and session["width"] > 0
    page.wait_for_function("(streamerDemo.stats.rtc?.framesDecoded ?? 0) >= 5")
    assert page.evaluate("streamerDemo.stats.rtc.codec").lower() == f"video/{session['codec']}"
    first = page.evaluate("streamerDemo.stats.rtc.framesDecoded")
    page.wait_for_function(f"streamerDemo.stats.rtc.framesDecoded > {first + 5}")  # still rising
    wait_frames(page, 5)  # and shown (requestVideoFrameCallback)
    stats = page.evaluate("streamerDemo.stats")
    assert stats["timeToFirstFrameMs"] is not None
    page.wait_for_function("streamerDemo.stats.latencyP50Ms !== null")  # chunk events line up with frames
    assert page.evaluate("streamerDemo.meanColor()") is not None
    save_screenshot(page, artifacts, "webrtc_tiny")
    stats = page.evaluate("streamerDemo.stats")
    measurements["webrtc_tiny"] = {
        k: stats[k] for k in ("timeToAdmittedMs", "timeToFirstFrameMs", "latencyP50Ms", "fps")
    } | {"codec": session["codec"], "jitterBufferMsPerFrame": stats["jitterBufferMsPerFrame"]}
    assert stop_stream(page) == "stopped"
    assert_valid_messages(page)


def test_websocket_frames_are_drawn(tiny_server, open_page, artifacts, measurements):
    page = open_page(tiny_server)
    session = start_stream(page, "ws")
    wait_frames(page, 8)
    frames = [read_frame(page)]
    assert frames[0].shape == (session["height"], session["width"], 3)
    # The random model's pictures change from chunk to chunk; wait until the canvas does.
    for _ in range(50):
        wait_frames(page, 1)
        frames.append(read_frame(page))
        if not np.array_equal(frames[0], frames[-1]):
            break
    assert not np.array_equal(frames[0], frames[-1]), "the canvas never changed"
    stats = page.evaluate("streamerDemo.stats")
    assert stats["chunks"] >= 4 and stats["latencyP50Ms"] is not None
    save_screenshot(page, artifacts, "websocket_tiny")
    measurements["websocket_tiny"] = {
        k: stats[k]
        for k in ("timeToAdmittedMs", "timeToFirstFrameMs", "latencyP50Ms", "fps", "droppedClient")
    }
    assert stop_stream(page) == "stopped"
    assert_valid_messages(page)


def test_refused_session_shows_the_server_reason(tiny_server, open_page, artifacts):
    assert tiny_server.info()["capacity"]["max_sessions"] == 1
    first = open_page(tiny_server)
    start_stream(first, "webrtc")
    for transport in ("webrtc", "ws"):
        second = open_page(tiny_server)
        second.check(f'input[name="transport"][value="{transport}"]')
        second.click("#start")
        second.wait_for_function("streamerDemo.state === 'refused'")
        refused = [e for e in second.evaluate("streamerDemo.events") if e["type"] == "refused"]
        assert len(refused) == 1 and refused[0]["reason"], refused
        reason = refused[0]["reason"]
        assert reason in second.inner_text("#state") and reason in second.inner_text("#overlay-msg")
        assert second.is_visible("#reconnect")
        save_screenshot(second, artifacts, f"refused_{transport}")
    assert first.evaluate("streamerDemo.state") == "admitted"  # the admitted stream goes on
    stop_stream(first)
    # With the slot free again, the refused page's Reconnect button gets a stream.
    tiny_server.wait_idle()
    second.click("#reconnect")
    second.wait_for_function("streamerDemo.state === 'admitted'")
    wait_frames(second, 3)


def test_keys_slider_and_microphone_send_protocol_messages(tiny_server, open_page):
    page = open_page(tiny_server)
    start_stream(page, "ws", scene="game")
    page.focus("#viewport")

    def actions() -> list[str]:
        return [m["action"] for m in page.evaluate("streamerDemo.sent") if m["type"] == "action"]

    page.keyboard.down("ArrowLeft")
    page.keyboard.down("ArrowLeft")  # auto-repeat sends nothing new
    page.keyboard.up("ArrowLeft")
    page.keyboard.down("KeyD")
    page.keyboard.down("KeyW")  # the latest key held wins
    page.keyboard.up("KeyW")  # back to the one still held
    page.keyboard.up("KeyD")
    page.wait_for_function("streamerDemo.events.filter(e => e.type === 'action').length >= 6")
    assert actions() == ["left", "none", "right", "up", "right", "none"]
    page.keyboard.down("ArrowUp")
    page.focus("#prompt")  # focus leaving the video releases the key
    assert actions()[-2:] == ["up", "none"]

    page.click('[data-scene="avatar"]')  # a redirect to the avatar preset, same stream
    page.wait_for_function(
        "streamerDemo.events.some(e => e.type === 'prompt' && e.applies_from_chunk != null)"
    )
    assert page.is_visible("#avatar-panel") and not page.is_visible("#game-panel")
    page.focus("#mouth")
    page.keyboard.press("End")  # slider to 1
    page.wait_for_function("streamerDemo.sent.some(m => m.type === 'control' && m.mouth === 1)")
    page.click("#mic")  # Chromium's fake microphone beeps: loudness drives the mouth
    page.wait_for_function("document.querySelector('#mic').getAttribute('aria-pressed') === 'true'")
    page.wait_for_function("streamerDemo.sent.filter(m => m.type === 'control').length >= 6")
    page.click("#mic")
    sent = page.evaluate("streamerDemo.sent")
    assert [m["type"] for m in sent].count("prompt") == 1
    assert page.evaluate("streamerDemo.state") == "admitted"
    assert len([e for e in page.evaluate("streamerDemo.events") if e["type"] == "admitted"]) == 1
    assert_valid_messages(page)


def test_phone_layout_is_one_column(tiny_server, open_page, artifacts):
    page = open_page(tiny_server, width=390, height=844)
    start_stream(page, "ws")
    wait_frames(page, 3)
    video = page.locator("#viewport").bounding_box()
    panel = page.locator(".panel").bounding_box()
    assert video["width"] <= 390 and panel["y"] >= video["y"] + video["height"]
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    save_screenshot(page, artifacts, "phone_tiny")
