"""`ClientQueue`: one client's bounded outbox, a `ChunkSink` that never blocks the engine.

Chunks are latest-wins: when `max_chunks` are waiting, the oldest is dropped and its frames are
counted. Events (acks, errors, ended) are kept in order and delivered before chunks, so a
stop or an error is never stuck behind video (pipecat's system frames); they are bounded too,
dropping the oldest `stats` first, so a flood of bad messages cannot grow memory.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

from streamer.events import Chunk


class QueueClosed(Exception):
    """`get()` on a closed, drained queue."""


class ClientQueue:
    def __init__(
        self,
        max_chunks: int = 4,
        max_events: int = 256,
        accept_chunks: bool = True,
        on_drop: Callable[[int], None] | None = None,
    ) -> None:
        self._chunks: deque[Chunk] = deque()
        self._events: deque[dict] = deque()
        self._max_chunks = max(1, max_chunks)
        self._max_events = max_events
        self._wake = asyncio.Event()
        self._on_drop = on_drop
        self.accept_chunks = accept_chunks
        self.closed = False
        self.frames_dropped = 0
        self.chunks_dropped = 0
        self.events_dropped = 0

    # ---- ChunkSink (engine side; loop thread, never blocks) ----
    def on_chunk(self, chunk: Chunk) -> None:
        if self.closed or not self.accept_chunks:
            return
        if len(self._chunks) >= self._max_chunks:
            old = self._chunks.popleft()
            self.chunks_dropped += 1
            self.frames_dropped += len(old.frames)
            if self._on_drop is not None:
                self._on_drop(len(old.frames))
        self._chunks.append(chunk)
        self._wake.set()

    def on_event(self, event: dict) -> None:
        if self.closed:
            return
        if len(self._events) >= self._max_events:
            stats = next((e for e in self._events if e.get("type") == "stats"), None)
            if stats is not None:
                self._events.remove(stats)
            else:
                self._events.popleft()
            self.events_dropped += 1
        self._events.append(event)
        self._wake.set()

    def push_front(self, event: dict) -> None:
        """An event that must precede whatever the engine already sent (`admitted`)."""
        if not self.closed:
            self._events.appendleft(event)
            self._wake.set()

    # ---- consumer side ----
    def __len__(self) -> int:
        return len(self._chunks) + len(self._events)

    async def get(self) -> Chunk | dict:
        """Next event, else next chunk. Safe to cancel (nothing is taken until it returns)."""
        while not self._events and not self._chunks:
            if self.closed:
                raise QueueClosed
            self._wake.clear()
            await self._wake.wait()
        return self._events.popleft() if self._events else self._chunks.popleft()

    def close(self) -> None:
        """Stop accepting; `get()` drains what is queued, then raises `QueueClosed`."""
        self.closed = True
        self._wake.set()

    def clear(self) -> None:
        self._chunks.clear()
        self._events.clear()
