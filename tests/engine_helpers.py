"""Engine test helpers: a sink that records what a session receives, and a run-to-N-chunks driver."""

from __future__ import annotations

import asyncio

from streamer.engine import Engine
from streamer.engine_factory import tiny_embedded
from streamer.events import Chunk
from streamer.protocol import StartMessage


class TinyWrapper:
    """The tiny embedded model behind a wrapper: subclasses override the model calls they watch."""

    def __init__(self) -> None:
        self.inner = tiny_embedded()
        self.spec = self.inner.spec

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


class Collector:
    def __init__(self) -> None:
        self.chunks: list[Chunk] = []
        self.events: list[dict] = []
        self.changed = asyncio.Event()

    def on_chunk(self, chunk: Chunk) -> None:
        self.chunks.append(chunk)
        self.changed.set()

    def on_event(self, event: dict) -> None:
        self.events.append(event)
        self.changed.set()

    async def wait_chunks(self, n: int, limit_s: float = 60.0) -> None:
        async def loop() -> None:
            while len(self.chunks) < n and not any(e["type"] in ("ended", "error") for e in self.events):
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(loop(), limit_s)


async def run_sessions(engine: Engine, starts: list[StartMessage], chunks: int,
                       limit_s: float = 60.0) -> list[Collector]:
    await engine.start()
    try:
        sinks = [Collector() for _ in starts]
        for s, sink in zip(starts, sinks, strict=True):
            await engine.open_session(s, sink)
        for sink in sinks:
            await sink.wait_chunks(chunks, limit_s)
        return sinks
    finally:
        await engine.stop()
