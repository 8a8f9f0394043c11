"""A client that stops reading loses old chunks (counted) and never blocks the engine or others."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import websockets

from streamer import metrics
from streamer.events import Chunk
from streamer.transport.client_queue import ClientQueue
from tests.fakes import FakeEngine
from tests.transport.conftest import next_chunk, next_event, wait_until


def chunk(i: int, frames: int = 4) -> Chunk:
    return Chunk("00000000-0000-0000-0000-000000000000", i, i * frames,
                 np.zeros((frames, 2, 2, 3), np.uint8), float(i), 30.0)  # fmt: skip


async def test_queue_is_latest_wins_and_events_go_first():
    drops: list[int] = []
    q = ClientQueue(max_chunks=2, on_drop=drops.append)
    for i in range(5):
        q.on_chunk(chunk(i))
    q.on_event({"type": "error"})
    assert q.frames_dropped == 12 and drops == [4, 4, 4]
    assert (await q.get()) == {"type": "error"}
    assert [(await q.get()).chunk_index for _ in range(2)] == [3, 4]
    assert len(q) == 0


async def test_queue_bounds_events_dropping_stats_first():
    q = ClientQueue(max_events=3)
    q.on_event({"type": "stats"})
    for i in range(3):
        q.on_event({"type": "error", "i": i})
    assert q.events_dropped == 1
    assert [(await q.get())["i"] for _ in range(3)] == [0, 1, 2]


async def test_slow_consumer_drops_without_blocking(start_server):
    # 128x128 random pixels as raw RGB: 196 KB a chunk, so the socket buffers fill quickly.
    engine = FakeEngine(fps=60, frames_per_chunk=4, width=128, height=128, noise=True)
    server = await start_server(engine, send_queue_chunks=2)
    dropped = metrics.FRAMES_DROPPED.labels("ws")
    before = dropped._value.get()

    # max_queue=1: the client library stops reading the socket once one message is buffered.
    slow = await websockets.connect(server.ws_url, max_queue=1, max_size=None)
    async with websockets.connect(server.ws_url) as normal:
        await slow.send(json.dumps({"type": "start", "prompt": "a", "encoding": "rgb"}))
        await normal.send(json.dumps({"type": "start", "prompt": "b"}))
        await next_event(normal, "admitted")
        received = 0

        async def read_normal() -> None:
            nonlocal received
            while True:
                await next_chunk(normal)
                received += 1

        reader = asyncio.create_task(read_normal())
        slow_id = next(sid for sid, s in engine.sessions.items() if s.prompt == "a")
        # The engine keeps producing for the slow session while its client reads nothing.
        await wait_until(lambda: dropped._value.get() > before)
        made = engine.sessions[slow_id].chunk_index
        await wait_until(lambda: engine.sessions[slow_id].chunk_index > made + 5)
        # Meanwhile the other client keeps receiving.
        got = received
        await wait_until(lambda: received > got + 5)
        # It vanishes without a closing handshake (a graceful close would wait on its own buffers).
        slow.transport.abort()
        await wait_until(lambda: slow_id in engine.closed)
        got = received
        await wait_until(lambda: received > got)
        reader.cancel()
