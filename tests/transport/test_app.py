"""HTTP endpoints of the app: probes, metrics, info, the client page; and a WebSocket fuzz."""

from __future__ import annotations

import json
import random

import httpx
import websockets

from streamer.transport.app import create_app
from streamer.transport.settings import ServerSettings
from tests.fakes import FakeEngine
from tests.transport.conftest import next_chunk, next_event


async def test_probes_follow_engine_readiness():
    engine = FakeEngine()
    app = create_app(engine, ServerSettings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://t") as http:
        assert (await http.get("/healthz")).status_code == 503  # lifespan not run: engine not started
        assert (await http.get("/readyz")).json() == {"status": "not_ready"}
        await engine.start()
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        assert (await http.get("/readyz")).status_code == 200
        app.state.ctx.draining = True
        assert (await http.get("/readyz")).json() == {"status": "draining"}


async def test_info_and_metrics(server):
    async with httpx.AsyncClient(base_url=server.url) as http, websockets.connect(server.ws_url) as ws:
        await ws.send(json.dumps({"type": "start"}))
        await next_event(ws, "admitted")
        await ws.send("garbage")
        await next_event(ws, "error")
        info = (await http.get("/v1/info")).json()
        assert info["sessions"] == 1 and info["protocol"] == 1 and info["transports"]["ws"] == "/v1/stream"
        await next_chunk(ws)
        text = (await http.get("/metrics")).text
    for name in (
        "streamer_sessions_active",
        "streamer_sessions_refused_total",
        "streamer_batch_size_bucket",
        "streamer_step_seconds_bucket",
        "streamer_queue_delay_seconds_bucket",
        "streamer_chunk_latency_seconds_bucket",
        "streamer_deadline_misses_total",
        'streamer_frames_sent_total{transport="ws"}',
        'streamer_control_errors_total{code="invalid_json",transport="ws"}',
        "process_resident_memory_bytes",
    ):
        assert name in text, name


async def test_root_serves_placeholder_or_client(tmp_path):
    engine = FakeEngine()
    empty = create_app(engine, ServerSettings(web_dir=tmp_path / "missing"))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(empty), base_url="http://t") as http:
        r = await http.get("/")
        assert r.status_code == 200 and "client is missing" in r.text
        r = await http.get("/nope")
        assert r.status_code == 404 and r.json()["code"] == "not_found"
    (tmp_path / "index.html").write_text("<h1>client</h1>")
    (tmp_path / "app.js").write_text("console.log(1)")
    web = create_app(engine, ServerSettings(web_dir=tmp_path))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(web), base_url="http://t") as http:
        assert (await http.get("/")).text == "<h1>client</h1>"
        assert (await http.get("/app.js")).text == "console.log(1)"
        assert (await http.get("/v1/info")).status_code == 200  # routes win over static files


def _random_message(rng: random.Random) -> str | bytes:
    kind = rng.randrange(6)
    if kind == 0:
        return rng.randbytes(rng.randrange(1, 200))
    if kind == 1:
        return "".join(chr(rng.randrange(1, 0x2FFF)) for _ in range(rng.randrange(1, 100)))
    if kind == 2:
        return "[" * rng.randrange(1, 5000)
    values = [None, True, -1, 2**70, 1e308, "x" * rng.randrange(600), [], {"a": [1]}, "left", 0.5]
    msg = {"type": rng.choice(["prompt", "action", "control", "seed", "ping", "attach", "nope", 5])}
    for field in rng.sample(
        ["prompt", "action", "mouth", "eyes", "seed", "t", "token", "zzz"], rng.randrange(4)
    ):
        msg[field] = rng.choice(values)
    return json.dumps(msg)


async def test_fuzzed_messages_each_get_one_answer_and_session_goes_on(server):
    """Every message is answered (error, ack or pong); chunks keep coming. Seeded, so repeatable."""
    rng = random.Random(1234)
    async with websockets.connect(server.ws_url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "start", "prompt": "red"}))
        await next_event(ws, "admitted")
        answers = 0
        for _ in range(150):
            await ws.send(_random_message(rng))
            event = await next_event(ws)
            while event["type"] in ("started", "stats"):
                event = await next_event(ws)
            assert event["type"] in ("error", "pong", "prompt", "action", "control", "seed"), event
            answers += 1
        assert answers == 150
        await next_chunk(ws)
        assert len(server.engine.sessions) == 1
