"""`ChunkVideoTrack`: bounded playout buffer (latest wins), repeats when starved, chunk markers."""

from __future__ import annotations

import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError

from streamer.events import Chunk
from streamer.transport.video_track import ChunkVideoTrack


def chunk(i: int, value: int, frames: int = 4) -> Chunk:
    data = np.full((frames, 8, 8, 3), value, np.uint8)
    data[:, 0, 0, 0] = np.arange(frames)  # frame number within the chunk
    return Chunk("00000000-0000-0000-0000-000000000000", i, i * frames, data, 100.0 + i, 1000.0)


async def test_burst_skips_to_newest_chunk_and_counts_drops():
    started: list[int] = []
    track = ChunkVideoTrack(
        fps=1000.0, frames_per_chunk=4, on_chunk_started=lambda c: started.append(c.chunk_index)
    )
    for i in range(5):  # five chunks at once: more than the two-chunk buffer
        track.push(chunk(i, 10 * i))
    assert track.frames_dropped > 0
    first = (await track.recv()).to_ndarray(format="rgb24")
    assert first[4, 4, 1] >= 30  # played from one of the newest chunks, not chunk 0
    assert started and started[0] >= 3
    track.stop()


async def test_starved_track_repeats_last_frame_with_rising_pts():
    track = ChunkVideoTrack(fps=1000.0, frames_per_chunk=2)
    track.push(chunk(0, 50, frames=2))
    pts = []
    for _ in range(5):
        pts.append((await track.recv()).pts)
    assert track.frames_repeated == 3 and track.frames_sent == 5
    assert pts == sorted(pts) and len(set(pts)) == len(pts)
    track.stop()
    with pytest.raises(MediaStreamError):
        await track.recv()


async def test_fps_follows_the_chunks():
    track = ChunkVideoTrack(fps=30.0, frames_per_chunk=2)
    c = chunk(0, 1, frames=2)
    track.push(Chunk(c.session_id, 0, 0, c.frames, c.capture_ts, 500.0))
    assert track.fps == 500.0
    track.stop()
