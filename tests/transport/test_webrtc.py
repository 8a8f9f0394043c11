"""WebRTC over loopback with an aiortc client: frames, data channel control, WHEP, bad SDP."""

from __future__ import annotations

import asyncio

import httpx
import numpy as np
import pytest
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription

from streamer.client import StreamError, connect
from streamer.transport.sdp import strip_mdns
from tests.fakes import FakeEngine, prompt_colour
from tests.transport.conftest import next_frame, wait_until

# H.264/VP8 shift a flat colour a little (4:2:0, limited range)
TOL = 14


def colour_close(image: np.ndarray, rgb: tuple[int, int, int]) -> bool:
    return bool(np.all(np.abs(image.reshape(-1, 3).mean(axis=0) - np.array(rgb)) <= TOL))


@pytest.mark.parametrize("codec", ["h264", "vp8"])
async def test_webrtc_frames_and_data_channel_control(server, codec):
    stream = await connect(server.url, "webrtc", prompt="red ball", codec=codec)
    try:
        assert stream.session["codec"] == codec and stream.session["token"]
        # The answer must really put that codec first (aiortc's client offers VP8 first).
        video = stream.pc.remoteDescription.sdp.split("m=video", 1)[1]
        first_pt = video.split("\r\n", 1)[0].split()[2]
        assert f"a=rtpmap:{first_pt} {'H264' if codec == 'h264' else 'VP8'}/90000" in video
        frame = await next_frame(stream)
        assert frame.image.shape == (64, 64, 3)
        assert colour_close(frame.image, prompt_colour("red ball"))
        assert any(e["type"] == "started" for e in stream.events)
        ack = await stream.prompt("blue sky over grass")
        assert ack["type"] == "prompt" and ack["unknown_words"] == []
        target = prompt_colour("blue sky over grass")
        for _ in range(200):  # the new colour shows within a few chunks
            if colour_close((await next_frame(stream)).image, target):
                break
        else:
            pytest.fail("redirect never showed in the video")
        with pytest.raises(StreamError) as info:
            await stream.request({"type": "control", "mouth": 3})
        assert info.value.event["field"] == "mouth"
        assert any(e["type"] == "chunk" and e["capture_ts"] > 0 for e in stream.events)
        assert 0 < await stream.ping() < 5
    finally:
        await stream.close()
    await wait_until(lambda: stream.session["session_id"] in server.engine.closed)
    assert not server.ctx.peers


async def test_webrtc_peer_closing_without_stop_frees_the_session(server):
    """No `stop`, no DELETE. (A peer that sends nothing at all is caught by ICE consent
    freshness after ~30 s: too slow for this suite.)"""
    stream = await connect(server.url, "webrtc", prompt="a")
    await next_frame(stream)
    sid = stream.session["session_id"]
    for task in list(stream._tasks):
        task.cancel()
    await stream.pc.close()  # the server sees the DTLS/ICE transport close
    await wait_until(lambda: sid in server.engine.closed)


async def test_webrtc_refused_is_503(start_server):
    server = await start_server(FakeEngine(max_sessions=0))
    with pytest.raises(StreamError) as info:
        await connect(server.url, "webrtc", prompt="a")
    assert info.value.event["type"] == "refused" and "capacity" in info.value.event["reason"]
    assert not server.ctx.peers


async def _offer_sdp() -> tuple[RTCPeerConnection, str]:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
    pc.addTransceiver("video", direction="recvonly")
    await pc.setLocalDescription(await pc.createOffer())
    return pc, pc.localDescription.sdp


async def test_whep_post_and_delete(server):
    pc, sdp = await _offer_sdp()
    got = asyncio.get_running_loop().create_future()

    tasks = []

    @pc.on("track")
    def on_track(track):
        async def first():
            got.set_result(await track.recv())

        tasks.append(asyncio.create_task(first()))

    async with httpx.AsyncClient(base_url=server.url) as http:
        r = await http.post("/v1/whep?prompt=green%20grass&seed=3&codec=vp8", content=sdp,
                            headers={"content-type": "application/sdp"})  # fmt: skip
        assert r.status_code == 201, r.text
        assert r.headers["content-type"].startswith("application/sdp")
        location = r.headers["location"]
        sid = r.headers["x-streamer-session-id"]
        assert location == f"/v1/whep/{sid}"
        await pc.setRemoteDescription(RTCSessionDescription(r.text, "answer"))
        frame = await asyncio.wait_for(got, 10)
        assert colour_close(frame.to_ndarray(format="rgb24"), prompt_colour("green grass"))
        patch = await http.patch(location, content="a=mid:0\r\na=candidate:1 1 udp 1 host.local 9 typ host\r\n",
                                 headers={"content-type": "application/trickle-ice-sdpfrag"})  # fmt: skip
        assert patch.status_code == 204
        assert (await http.delete(location)).status_code == 200
        assert sid in server.engine.closed
        assert (await http.delete(location)).status_code == 404
    await pc.close()


async def test_webrtc_trickle_patch_and_delete_need_the_token(server):
    pc, sdp = await _offer_sdp()
    async with httpx.AsyncClient(base_url=server.url) as http:
        r = await http.post("/v1/webrtc/offer", json={"sdp": sdp, "type": "offer", "start": {"prompt": "a"}})
        answer = r.json()
        sid, token = answer["session_id"], answer["token"]
        url = f"/v1/webrtc/{sid}"
        cand = {"candidate": "candidate:1 1 udp 2130706431 127.0.0.1 9 typ host", "sdpMid": "0",
                "sdpMLineIndex": 0}  # fmt: skip
        mdns = {"candidate": "candidate:2 1 udp 1 abc.local 9 typ host", "sdpMid": "0"}
        bad = await http.patch(url, json={"token": "nope", "candidates": [cand]})
        assert bad.status_code == 403 and bad.json()["field"] == "token"
        ok = await http.patch(url, json={"token": token, "candidates": [cand, mdns]})
        assert ok.status_code == 200 and ok.json()["ignored"] >= 1
        assert (await http.delete(url)).status_code == 403
        assert (await http.delete(url, headers={"authorization": f"Bearer {token}"})).status_code == 200
        assert sid in server.engine.closed
    await pc.close()


BAD_OFFERS = [
    ("not sdp", "hello"),
    ("no video", "v=0\r\no=- 1 1 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n"),
    ("garbage media", "v=0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\na=fingerprint:x\r\na=ice-ufrag:y\r\nzzz\r\n"),
]


@pytest.mark.parametrize("sdp", [b[1] for b in BAD_OFFERS], ids=[b[0] for b in BAD_OFFERS])
async def test_invalid_sdp_is_400(server, sdp):
    async with httpx.AsyncClient(base_url=server.url) as http:
        r = await http.post("/v1/webrtc/offer", json={"sdp": sdp, "type": "offer"})
        assert r.status_code == 400 and r.json()["code"] == "invalid_sdp" and r.json()["field"] == "sdp"
        r = await http.post("/v1/whep", content=sdp, headers={"content-type": "application/sdp"})
        assert r.status_code == 400 and r.json()["code"] == "invalid_sdp"
    assert not server.engine.sessions and not server.ctx.peers


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (b"{not json", 400, None),
        (b"[]", 400, None),
        (b'{"sdp": "v=0", "type": "answer"}', 400, "type"),
        (b'{"sdp": "v=0", "type": "offer", "start": {"steps": 42}}', 400, "start.steps"),
        (b'{"sdp": "v=0", "type": "offer", "extra": 1}', 400, "extra"),
        (b'{"sdp": "' + b"x" * 70000 + b'"}', 413, None),
    ],
)
async def test_malformed_offer_bodies_are_4xx_naming_the_problem(server, body, status, field):
    async with httpx.AsyncClient(base_url=server.url) as http:
        r = await http.post("/v1/webrtc/offer", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status and r.json()["type"] == "error" and r.json()["field"] == field


async def test_whep_wrong_content_type_and_bad_query(server):
    async with httpx.AsyncClient(base_url=server.url) as http:
        r = await http.post("/v1/whep", content="v=0", headers={"content-type": "text/plain"})
        assert r.status_code == 415
        r = await http.post("/v1/whep?steps=abc", content="v=0", headers={"content-type": "application/sdp"})
        assert r.status_code == 400 and r.json()["field"] == "steps"


def test_strip_mdns_keeps_other_candidates():
    sdp = "v=0\r\na=candidate:1 1 udp 1 x.local 9 typ host\r\na=candidate:2 1 udp 1 10.0.0.1 9 typ host\r\n"
    out = strip_mdns(sdp)
    assert ".local" not in out and "10.0.0.1" in out
