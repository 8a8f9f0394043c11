"""Exceptions inside model batches, seen through the server.

The engine re-runs a failed batch item by item: a session whose own item still fails gets an
`error` event and `ended`, and its slot is freed; the sessions that shared its batch stream on,
and a failure that is nobody's (a transient one) changes no stream at all.
"""

from __future__ import annotations

import asyncio
import json
import threading

import numpy as np
import websockets

from streamer.engine import Engine
from streamer.protocol import StartMessage
from streamer.transport.chunk_codec import decode_chunk
from tests.faults.conftest import all_slots_free, info, tiny_engine
from tests.transport.conftest import HANG_GUARD_S, next_chunk, next_event, wait_until

POISON = "poison"


class Reader:
    """Reads one WebSocket in the background: decoded chunks by index, and JSON events."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.chunks: dict[int, np.ndarray] = {}  # chunk index -> frames (F, H, W, 3)
        self.events: list[dict] = []
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        async for message in self.ws:
            if isinstance(message, bytes):
                chunk = decode_chunk(message)
                self.chunks[chunk.chunk_index] = np.stack(chunk.frames)
            else:
                self.events.append(json.loads(message))

    def count(self) -> int:
        return len(self.chunks)

    def errors(self) -> list[dict]:
        return [e for e in self.events if e["type"] == "error"]


async def start(url: str, prompt: str, seed: int, encoding: str = "jpeg") -> tuple[Reader, str]:
    ws = await websockets.connect(url, max_size=None)
    await ws.send(json.dumps({"type": "start", "prompt": prompt, "seed": seed, "encoding": encoding}))
    sid = (await next_event(ws, "admitted"))["session_id"]
    await next_chunk(ws)
    return Reader(ws), sid


async def test_failing_session_ends_alone_and_its_batch_mates_stream_on(start_server):
    engine = tiny_engine()
    real = engine.model.denoise

    def denoise(x, t, cond, cache):  # the model chokes on one session's conditioning
        if any(POISON in p.text for p in cond.prompts):
            raise RuntimeError("injected model failure")
        return real(x, t, cond, cache)

    engine.model.denoise = denoise  # type: ignore[method-assign]
    server = await start_server(engine)
    good = [
        await start(server.ws_url, p, i)
        for i, p in enumerate(["a red ball on grass", "a blue square on sea"])
    ]
    bad_ws = await websockets.connect(server.ws_url, max_size=None)
    await bad_ws.send(json.dumps({"type": "start", "prompt": "a green ball on sand", "seed": 9}))
    bad_id = (await next_event(bad_ws, "admitted"))["session_id"]
    await next_chunk(bad_ws)
    # Streaming fine until a redirect gives the model what it cannot take.
    await bad_ws.send(json.dumps({"type": "prompt", "prompt": POISON, "transition": "cut", "id": 1}))
    assert (await next_event(bad_ws, "prompt"))["id"] == 1
    error = await next_event(bad_ws, "error")
    assert error["code"] == "model_error" and "injected" in error["message"]
    assert (await next_event(bad_ws, "ended"))["reason"] == "error"
    await wait_until(lambda: bad_ws.close_code is not None)
    assert bad_ws.close_code == 1000
    await wait_until(lambda: bad_id not in engine.sessions)
    assert engine.pool.free_slots == engine.pool.num_slots - 2
    assert (await info(server.url))["sessions"] == 2
    # The sessions batched with it go on, with no error.
    counts = [reader.count() for reader, _ in good]
    await wait_until(lambda: all(r.count() >= c + 4 for (r, _), c in zip(good, counts, strict=True)))
    for reader, sid in good:
        assert reader.errors() == [] and sid in engine.sessions
        await reader.ws.close()
        reader.task.cancel()
    await wait_until(lambda: all_slots_free(engine))


async def reference(prompt: str, seed: int, chunks: int) -> dict[int, np.ndarray]:
    """The same stream from an engine of its own, with nothing failing."""
    engine: Engine = tiny_engine(max_sessions=1)
    got: dict[int, np.ndarray] = {}
    done = asyncio.Event()

    class Sink:
        def on_chunk(self, chunk) -> None:
            got[chunk.chunk_index] = chunk.frames
            if len(got) >= chunks:
                done.set()

        def on_event(self, event: dict) -> None:
            pass

    await engine.start()
    try:
        await engine.open_session(StartMessage(prompt=prompt, seed=seed), Sink())
        async with asyncio.timeout(HANG_GUARD_S):
            await done.wait()
    finally:
        await engine.stop()
    return got


async def test_transient_batch_failure_fails_nobody_and_changes_no_stream(start_server):
    """A decode that fails once (say, memory for that batch size) is re-run item by item: every
    session succeeds alone, and each stream must be exactly what it would have been."""
    engine = tiny_engine(max_sessions=2)
    real = engine.model.decode
    armed, fired = threading.Event(), threading.Event()

    def decode(x0):
        if armed.is_set() and not fired.is_set():
            fired.set()
            raise RuntimeError("injected transient failure")
        return real(x0)

    engine.model.decode = decode  # type: ignore[method-assign]
    server = await start_server(engine)
    starts = [("a red ball moving left on grass", 11), ("game: a blue character on sand", 12)]
    readers = [await start(server.ws_url, p, s, encoding="rgb") for p, s in starts]
    armed.set()
    await wait_until(fired.is_set)
    chunks = max(r.count() for r, _ in readers) + 4  # well past the failed batch
    await wait_until(lambda: all(r.count() >= chunks for r, _ in readers))
    for reader, sid in readers:
        assert reader.errors() == [] and sid in engine.sessions
        await reader.ws.close()
        reader.task.cancel()
    await wait_until(lambda: all_slots_free(engine))
    for (reader, _), (prompt, seed) in zip(readers, starts, strict=True):
        ref = await reference(prompt, seed, chunks)
        for index, frames in reader.chunks.items():
            if index in ref:
                # Batching may only change float summation order (as in tests/test_engine.py).
                diff = np.abs(frames.astype(np.int16) - ref[index].astype(np.int16)).max()
                assert diff <= 2, f"chunk {index} of {prompt!r} differs by {diff} levels"
