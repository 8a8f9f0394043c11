"""WebSocket transport with a FakeEngine: chunks, redirects, isolation, attach, disconnect."""

from __future__ import annotations

import json

import numpy as np
import websockets

from streamer.transport.chunk_codec import decode_chunk
from tests.fakes import prompt_colour
from tests.transport.conftest import next_chunk, next_event, wait_until


def colour_of(data: bytes) -> np.ndarray:
    return decode_chunk(data).frames.reshape(-1, 3).mean(axis=0)


def close_to(a: np.ndarray, b: tuple[int, int, int], tol: float = 8.0) -> bool:
    return bool(np.all(np.abs(a - np.array(b)) <= tol))


async def start(ws, prompt: str = "red ball", **fields) -> dict:
    await ws.send(json.dumps({"type": "start", "prompt": prompt, **fields}))
    return await next_event(ws, "admitted")


async def test_session_receives_decodable_chunks(server):
    async with websockets.connect(server.ws_url) as ws:
        admitted = await start(ws, "red ball")
        assert admitted["protocol"] == 1 and admitted["token"]
        started = await next_event(ws, "started")
        data = await next_chunk(ws)
        chunk = decode_chunk(data)
        assert chunk.session_id == admitted["session_id"]
        assert chunk.frames.shape == (4, 64, 64, 3)
        assert chunk.chunk_index >= started["chunk_index"]
        assert chunk.first_frame == 4 * chunk.chunk_index
        assert chunk.capture_ts > 0 and chunk.fps == 30.0
        assert close_to(colour_of(data), prompt_colour("red ball"))


async def test_raw_rgb_encoding_is_exact(server):
    async with websockets.connect(server.ws_url) as ws:
        await start(ws, "blue sky", encoding="rgb")
        chunk = decode_chunk(await next_chunk(ws))
        assert chunk.encoding == "rgb"
        assert (chunk.frames == np.array(prompt_colour("blue sky"), dtype=np.uint8)).all()


async def test_redirect_changes_subsequent_chunks(server):
    async with websockets.connect(server.ws_url) as ws:
        await start(ws, "red ball")
        await ws.send(json.dumps({"type": "prompt", "prompt": "green grass zzz", "id": 7}))
        ack = await next_event(ws, "prompt")
        assert ack["id"] == 7 and ack["unknown_words"] == ["zzz"]
        while True:  # chunks before applies_from_chunk may still carry the old colour
            data = await next_chunk(ws)
            if decode_chunk(data).chunk_index >= ack["applies_from_chunk"]:
                break
        assert close_to(colour_of(data), prompt_colour("green grass zzz"))


async def test_two_sessions_are_isolated(server):
    async with websockets.connect(server.ws_url) as a, websockets.connect(server.ws_url) as b:
        id_a = (await start(a, "red ball"))["session_id"]
        id_b = (await start(b, "blue sky"))["session_id"]
        assert id_a != id_b
        await a.send(json.dumps({"type": "prompt", "prompt": "green grass"}))
        await next_event(a, "prompt")
        for _ in range(3):
            data = await next_chunk(b)
            assert decode_chunk(data).session_id == id_b
            assert close_to(colour_of(data), prompt_colour("blue sky"))


async def test_attach_needs_the_token(server):
    async with websockets.connect(server.ws_url) as owner, websockets.connect(server.ws_url) as other:
        admitted = await start(owner, "red ball")
        sid = admitted["session_id"]
        # Without a session, control is refused; with a wrong token, attach is refused.
        await other.send(json.dumps({"type": "prompt", "prompt": "blue sky"}))
        assert (await next_event(other, "error"))["code"] == "not_started"
        await other.send(json.dumps({"type": "attach", "session_id": sid, "token": "guess"}))
        err = await next_event(other, "error")
        assert err["code"] == "unauthorized" and err["field"] == "token"
        assert server.engine.sessions[sid].controls == []
        # With the token it may control the session, and the owner's frames follow.
        await other.send(json.dumps({"type": "attach", "session_id": sid, "token": admitted["token"]}))
        assert (await next_event(other, "attached"))["session_id"] == sid
        await other.send(json.dumps({"type": "prompt", "prompt": "blue sky"}))
        ack = await next_event(other, "prompt")
        while decode_chunk(data := await next_chunk(owner)).chunk_index < ack["applies_from_chunk"]:
            pass
        assert close_to(colour_of(data), prompt_colour("blue sky"))


async def test_engine_control_error_names_the_field(start_server):
    from tests.fakes import FakeEngine

    server = await start_server(FakeEngine(actions=frozenset({"none"})))
    async with websockets.connect(server.ws_url) as ws:
        await start(ws)
        await ws.send(json.dumps({"type": "action", "action": "left", "id": "a1"}))
        err = await next_event(ws, "error")
        assert (err["code"], err["field"], err["id"]) == ("invalid_field", "action", "a1")
        await ws.send(json.dumps({"type": "action", "action": "none"}))
        assert (await next_event(ws, "action"))["type"] == "action"


async def test_ping_pong_and_stop(server):
    async with websockets.connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "ping", "t": 1.5}))
        assert (await next_event(ws, "pong"))["t"] == 1.5
        sid = (await start(ws))["session_id"]
        await ws.send(json.dumps({"type": "stop"}))
        assert (await next_event(ws, "ended"))["reason"] == "stopped"
        await wait_until(lambda: ws.close_code is not None or sid in server.engine.closed)
    assert server.engine.closed[sid] == "stopped"


async def test_disconnect_closes_the_session(server):
    ws = await websockets.connect(server.ws_url)
    sid = (await start(ws))["session_id"]
    await next_chunk(ws)
    ws.transport.abort()  # TCP reset, no closing handshake
    await wait_until(lambda: sid in server.engine.closed)
    assert server.engine.closed[sid] == "disconnected"
    assert sid not in server.ctx.registry.sessions


async def test_refused_beyond_capacity_others_keep_streaming(start_server):
    from tests.fakes import FakeEngine

    server = await start_server(FakeEngine(max_sessions=1))
    async with websockets.connect(server.ws_url) as a, websockets.connect(server.ws_url) as b:
        await start(a)
        await b.send(json.dumps({"type": "start", "prompt": "x"}))
        refused = await next_event(b, "refused")
        assert "capacity" in refused["reason"]
        await wait_until(lambda: b.close_code is not None)
        assert b.close_code == 1013
        await next_chunk(a)
        await next_chunk(a)


async def test_shutdown_ends_every_session(start_server):
    server = await start_server()
    async with websockets.connect(server.ws_url) as a, websockets.connect(server.ws_url) as b:
        await start(a)
        await start(b)
        server.server.handle_exit(2, None)  # what Ctrl-C does
        assert (await next_event(a, "ended"))["reason"] == "shutdown"
        assert (await next_event(b, "ended"))["reason"] == "shutdown"
    await server.task
    assert server.engine.sessions == {} and server.engine.stopped


async def test_attach_with_non_ascii_token_is_unauthorized(server):
    async with websockets.connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "attach", "session_id": "x", "token": "é"}))
        assert (await next_event(ws, "error"))["code"] == "unauthorized"
