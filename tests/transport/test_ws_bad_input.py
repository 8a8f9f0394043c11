"""Bad input on the WebSocket: each case is answered with an error and the session goes on."""

from __future__ import annotations

import json

import pytest
import websockets

from streamer import metrics
from streamer.protocol import MAX_MESSAGE_BYTES
from tests.fakes import FakeEngine
from tests.transport.conftest import next_chunk, next_event, wait_until

CASES = [
    ("malformed json", '{"type": "prompt", "prompt": ', "invalid_json", None),
    ("not an object", "[1, 2, 3]", "not_object", None),
    ("no type", '{"prompt": "x"}', "missing_field", "type"),
    ("unknown type", '{"type": "teleport"}', "unknown_type", "type"),
    ("type not a string", '{"type": 5}', "unknown_type", "type"),
    ("wrong field type", '{"type": "seed", "seed": "12"}', "invalid_field", "seed"),
    ("negative seed", '{"type": "seed", "seed": -1}', "invalid_field", "seed"),
    ("bool for float", '{"type": "control", "mouth": true}', "invalid_field", "mouth"),
    ("out of range", '{"type": "control", "eyes": 1.5}', "invalid_field", "eyes"),
    ("unknown field", '{"type": "pause", "force": 1}', "unknown_field", "force"),
    ("bad action", '{"type": "action", "action": "jump"}', "invalid_field", "action"),
    ("huge prompt", json.dumps({"type": "prompt", "prompt": "x" * 5000}), "too_long", "prompt"),
    ("deep nesting", '{"type": "prompt", "prompt": "a", "x": ' + "[" * 40 + "]" * 40 + "}", "too_deep", None),
    ("very deep nesting", "[" * 60000 + "]" * 2000, "too_deep", None),
    ("binary garbage", b"\x00\xff\xfe garbage \x80", "invalid_json", None),
    ("binary non-object", b"12", "not_object", None),
    ("second start", '{"type": "start", "prompt": "again"}', "already_started", "type"),
    ("nan", '{"type": "ping", "t": NaN}', "invalid_field", "t"),
]


@pytest.mark.parametrize(("raw", "code", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
async def test_bad_message_gets_error_and_session_goes_on(server, raw, code, field):
    async with websockets.connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "start", "prompt": "red"}))
        sid = (await next_event(ws, "admitted"))["session_id"]
        await ws.send(raw)
        err = await next_event(ws, "error")
        assert (err["code"], err["field"]) == (code, field), err
        assert err["message"]
        await ws.send(json.dumps({"type": "ping", "t": 1.0}))
        await next_event(ws, "pong")
        await next_chunk(ws)
        assert sid in server.engine.sessions


async def test_error_before_start_keeps_connection_open(server):
    async with websockets.connect(server.ws_url) as ws:
        await ws.send("nonsense")
        assert (await next_event(ws, "error"))["code"] == "invalid_json"
        await ws.send(json.dumps({"type": "start", "prompt": "red", "steps": 99}))
        err = await next_event(ws, "error")
        assert (err["code"], err["field"]) == ("invalid_field", "steps")
        await ws.send(json.dumps({"type": "start", "prompt": "red"}))
        await next_event(ws, "admitted")


@pytest.mark.parametrize("binary", [False, True])
async def test_oversized_message_closes_1009_others_unaffected(server, binary):
    async with websockets.connect(server.ws_url) as ws, websockets.connect(server.ws_url) as other:
        for c in (ws, other):
            await c.send(json.dumps({"type": "start", "prompt": "red"}))
            await next_event(c, "admitted")
        sid = next(iter(server.engine.sessions))
        big = json.dumps({"type": "prompt", "prompt": "x" * (MAX_MESSAGE_BYTES + 10)})
        await ws.send(big.encode() if binary else big)
        assert (await next_event(ws, "error"))["code"] == "too_large"
        await wait_until(lambda: ws.close_code is not None)
        assert ws.close_code == 1009
        await wait_until(lambda: sid in server.engine.closed)
        await next_chunk(other)
        await other.send(json.dumps({"type": "ping", "t": 0}))
        await next_event(other, "pong")


async def test_over_uvicorn_cap_also_closes_1009(start_server):
    server = await start_server(ws_max_size=128 * 1024)
    async with websockets.connect(server.ws_url, max_size=None) as ws:
        await ws.send("x" * (256 * 1024))
        await wait_until(lambda: ws.close_code is not None)
        assert ws.close_code == 1009


async def test_no_start_in_time_closes_1008(start_server):
    server = await start_server(start_timeout_s=0.3)
    async with websockets.connect(server.ws_url) as ws:
        assert (await next_event(ws, "error"))["code"] == "start_timeout"
        await wait_until(lambda: ws.close_code is not None)
        assert ws.close_code == 1008


async def test_errors_are_counted_in_metrics(server):
    counter = metrics.CONTROL_ERRORS.labels("ws", "unknown_type")
    before = counter._value.get()
    async with websockets.connect(server.ws_url) as ws:
        await ws.send('{"type": "nope"}')
        await next_event(ws, "error")
    assert counter._value.get() == before + 1


async def test_engine_exception_is_an_internal_error(start_server):
    class Broken(FakeEngine):
        async def control(self, session_id, msg):
            raise RuntimeError("boom")

    server = await start_server(Broken())
    async with websockets.connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "start"}))
        await next_event(ws, "admitted")
        await ws.send(json.dumps({"type": "seed", "seed": 3}))
        assert (await next_event(ws, "error"))["code"] == "internal"
        await next_chunk(ws)
