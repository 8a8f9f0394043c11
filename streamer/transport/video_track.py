"""`ChunkVideoTrack`: an aiortc video track that plays a session's chunks at the session's fps.

It is the session's chunk sink on the WebRTC side. `push()` appends a chunk's frames to a short
playout buffer; `recv()` (called by aiortc's sender, which then encodes) hands out one frame
per tick of a wall clock at the chunk's fps:

- latest-frame-wins: the buffer holds at most two chunks' frames; beyond that the oldest frames
  are dropped (counted), so a slow encoder or a burst never builds a growing delay;
- if the next frame is not there yet, the last one is repeated (counted);
- if the loop stalls past two frame intervals, the clock re-anchors instead of bursting frames.

Presentation timestamps come from the same clock (90 kHz), so a lowered fps stays correct.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from fractions import Fraction

import numpy as np
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from av import VideoFrame

from streamer import metrics
from streamer.events import Chunk

_CLOCK = 90_000
_TIME_BASE = Fraction(1, _CLOCK)


class ChunkVideoTrack(MediaStreamTrack):
    kind = "video"

    def __init__(
        self,
        fps: float,
        frames_per_chunk: int,
        on_chunk_started: Callable[[Chunk], None] | None = None,
    ) -> None:
        super().__init__()
        self.fps = fps
        self.max_buffer = max(2, 2 * frames_per_chunk)
        self._frames: deque[tuple[np.ndarray, Chunk | None]] = deque()  # (frame, chunk if its first)
        self._last: np.ndarray | None = None
        self._arrived = asyncio.Event()
        self._on_chunk_started = on_chunk_started
        self._start: float | None = None
        self._next = 0.0
        self.frames_sent = 0
        self.frames_dropped = 0
        self.frames_repeated = 0

    # ---- ChunkSink side (loop thread, never blocks) ----
    def push(self, chunk: Chunk) -> None:
        if self.readyState != "live":
            return
        self.fps = chunk.fps or self.fps
        for i, frame in enumerate(chunk.frames):
            self._frames.append((frame, chunk if i == 0 else None))
        excess = len(self._frames) - self.max_buffer
        if excess > 0:
            # Skip to the newest chunk's frames, keeping the chunk marker of the first kept frame.
            keep = max(self.max_buffer // 2, len(chunk.frames))
            drop = len(self._frames) - keep
            first_kept = None
            for _ in range(drop):
                _, marker = self._frames.popleft()
                first_kept = marker or first_kept
            frame, marker = self._frames[0]
            self._frames[0] = (frame, marker or first_kept)
            self.frames_dropped += drop
            metrics.FRAMES_DROPPED.labels("webrtc").inc(drop)
        self._arrived.set()

    # ---- aiortc side ----
    async def recv(self) -> VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        if self._start is None:
            while not self._frames:
                self._arrived.clear()
                await self._arrived.wait()
                if self.readyState != "live":
                    raise MediaStreamError
            self._start = self._next = time.monotonic()
        else:
            interval = 1.0 / self.fps
            self._next += interval
            delay = self._next - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            elif delay < -2 * interval:
                self._next = time.monotonic()  # stalled: re-anchor rather than burst
            if self.readyState != "live":
                raise MediaStreamError
        frame = self._take()
        video = VideoFrame.from_ndarray(frame, format="rgb24")
        video.pts = int((self._next - self._start) * _CLOCK)
        video.time_base = _TIME_BASE
        self.frames_sent += 1
        metrics.FRAMES_SENT.labels("webrtc").inc()
        return video

    def _take(self) -> np.ndarray:
        if not self._frames:
            self.frames_repeated += 1
            assert self._last is not None
            return self._last
        frame, chunk = self._frames.popleft()
        if chunk is not None and self._on_chunk_started is not None:
            self._on_chunk_started(chunk)
        self._last = frame
        return frame

    def stop(self) -> None:
        super().stop()
        self._arrived.set()
