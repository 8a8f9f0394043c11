"""Python client for streamer's wire protocol v1, over WebSocket or WebRTC with one API.

    async with await connect("http://127.0.0.1:8000", "ws", prompt="a red ball") as stream:
        async for frame in stream.frames():      # Frame: image (H, W, 3) uint8 + timestamps
            ...
            await stream.prompt("a blue square")  # returns the ack event (raises StreamError)

Over WebSocket every frame carries its chunk's index and capture timestamp (binary header).
Over WebRTC the video has no such header: the server sends a `chunk` event on the data channel
as a chunk's first frame goes out, and the next decoded frame is matched to it.
Decoding (JPEG, YUV->RGB) runs in an executor, not on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from streamer.transport.chunk_codec import decode_chunk

_ACK_TYPES = {"prompt", "action", "control", "seed", "pause", "resume", "pong", "error", "attached"}


class StreamError(Exception):
    """Refused, rejected, or the stream broke; `event` is the server's event if there was one."""

    def __init__(self, message: str, event: dict | None = None) -> None:
        super().__init__(message)
        self.event = event


@dataclass(frozen=True)
class Frame:
    image: np.ndarray  # (H, W, 3) uint8
    recv_ts: float  # time.time() when it was decoded here
    capture_ts: float | None  # when the engine finished its chunk (WebRTC: chunk's first frame only)
    chunk_index: int | None
    frame_index: int | None
    first_in_chunk: bool


class StreamClient:
    """Transport-independent half: frames queue, events, request/ack matching."""

    transport = ""

    def __init__(
        self, max_queued_frames: int = 256, open_timeout_s: float = 10.0, request_timeout_s: float = 10.0
    ) -> None:
        self.open_timeout_s = open_timeout_s  # connect: handshake/offer to admitted
        self.request_timeout_s = request_timeout_s  # request: message to its ack
        self.session: dict = {}  # admitted (or WebRTC answer) fields: session_id, token, fps, ...
        self.events: deque[dict] = deque(maxlen=1000)
        self.ended: dict | None = None
        self.ended_event = asyncio.Event()
        self.frames_dropped = 0
        self._frames: asyncio.Queue[Frame | None] = asyncio.Queue(max_queued_frames)
        self._waiters: dict[Any, asyncio.Future] = {}
        self._ids = itertools.count(1)
        self._tasks: set[asyncio.Task] = set()

    # ---- receiving ----
    async def frames(self) -> AsyncIterator[Frame]:
        """Frames until the stream ends (latest-wins if you fall behind: see `frames_dropped`)."""
        while (frame := await self._frames.get()) is not None:
            yield frame
        self._frames.put_nowait(None)  # later calls end at once too

    async def next_frame(self) -> Frame:
        """The next frame; raises `StreamError` once the stream has ended."""
        frame = await self._frames.get()
        if frame is None:
            self._frames.put_nowait(None)
            raise StreamError(f"stream ended: {self.ended}", self.ended)
        return frame

    def _push_frame(self, frame: Frame | None) -> None:
        if self._frames.full():
            self._frames.get_nowait()
            self.frames_dropped += 1
        self._frames.put_nowait(frame)

    def _on_event(self, event: dict) -> None:
        self.events.append(event)
        waiter = self._waiters.pop(event.get("id"), None) if event.get("type") in _ACK_TYPES else None
        if waiter is not None and not waiter.done():
            waiter.set_result(event)
        if event.get("type") == "ended":
            self._finish(event)

    def _finish(self, event: dict) -> None:
        if self.ended is None:
            self.ended = event
            self.ended_event.set()
            self._push_frame(None)
            for waiter in self._waiters.values():
                if not waiter.done():
                    waiter.set_exception(StreamError(f"stream ended: {event}", event))

    # ---- sending ----
    async def send(self, message: dict) -> None:
        raise NotImplementedError

    async def request(self, message: dict) -> dict:
        """Send with a fresh `id`; the matching ack (raises `StreamError` for an error event,
        `TimeoutError` after `request_timeout_s`)."""
        msg_id = f"c{next(self._ids)}"
        waiter = asyncio.get_running_loop().create_future()
        self._waiters[msg_id] = waiter
        await self.send({**message, "id": msg_id})
        try:
            async with asyncio.timeout(self.request_timeout_s):
                reply = await waiter
        finally:
            self._waiters.pop(msg_id, None)
        if reply["type"] == "error":
            raise StreamError(f"{reply['code']} ({reply.get('field')}): {reply['message']}", reply)
        return reply

    async def prompt(self, text: str, transition: str = "blend") -> dict:
        return await self.request({"type": "prompt", "prompt": text, "transition": transition})

    async def action(self, action: str) -> dict:
        return await self.request({"type": "action", "action": action})

    async def control(self, mouth: float | None = None, eyes: float | None = None) -> dict:
        values = {k: v for k, v in (("mouth", mouth), ("eyes", eyes)) if v is not None}
        return await self.request({"type": "control", **values})

    async def seed(self, seed: int) -> dict:
        return await self.request({"type": "seed", "seed": seed})

    async def pause(self) -> dict:
        return await self.request({"type": "pause"})

    async def resume(self) -> dict:
        return await self.request({"type": "resume"})

    async def ping(self) -> float:
        """Round-trip time of a control message, seconds."""
        t = time.time()
        await self.request({"type": "ping", "t": t})
        return time.time() - t

    async def close(self) -> None:
        raise NotImplementedError

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def __aenter__(self) -> StreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class WsStreamClient(StreamClient):
    transport = "ws"

    def __init__(self, url: str, start: dict, **kw: Any) -> None:
        super().__init__(**kw)
        base = url.rstrip("/").replace("https://", "wss://").replace("http://", "ws://")
        self.url = base if base.endswith("/v1/stream") else base + "/v1/stream"
        self.start = {"type": "start", **start}
        self.ws: Any = None

    async def connect(self) -> WsStreamClient:
        import websockets

        self.ws = await websockets.connect(self.url, max_size=None, open_timeout=self.open_timeout_s)
        await self.ws.send(json.dumps(self.start))
        async with asyncio.timeout(self.open_timeout_s):
            while True:
                event = json.loads(await self.ws.recv())
                self.events.append(event)
                if event["type"] == "admitted":
                    break
                if event["type"] in ("refused", "error"):
                    await self.ws.close()
                    raise StreamError(
                        f"{event['type']}: {event.get('reason') or event.get('message')}", event
                    )
        self.session = event
        self._spawn(self._read())
        return self

    async def _read(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            async for message in self.ws:
                if isinstance(message, str):
                    self._on_event(json.loads(message))
                    continue
                chunk = await loop.run_in_executor(None, decode_chunk, message)
                now = time.time()
                for i, image in enumerate(chunk.frames):
                    self._push_frame(
                        Frame(image, now, chunk.capture_ts, chunk.chunk_index, chunk.first_frame + i, i == 0)
                    )
        except Exception as exc:  # connection lost, bad chunk: end the stream with the reason
            self._finish({"type": "ended", "reason": f"client error: {exc}"})
        finally:
            code = getattr(self.ws, "close_code", None)
            self._finish({"type": "ended", "reason": f"connection closed ({code})"})

    async def send(self, message: dict) -> None:
        await self.ws.send(json.dumps(message))

    async def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                if self.ended is None:
                    await self.ws.send(json.dumps({"type": "stop"}))
            await self.ws.close()
        for task in list(self._tasks):
            task.cancel()
        self._finish({"type": "ended", "reason": "closed by client"})


async def connect(
    url: str, transport: str = "ws", *, open_timeout_s: float = 10.0, **start: Any
) -> StreamClient:
    """Start a session at `url` (`http://host:port`); `start` holds StartMessage fields.

    WebRTC also takes `codec="h264"|"vp8"`. Raises `StreamError` when refused or rejected.
    """
    if transport == "ws":
        start.pop("codec", None)
        return await WsStreamClient(url, start, open_timeout_s=open_timeout_s).connect()
    if transport == "webrtc":
        from streamer.client_webrtc import WebRtcStreamClient

        codec = start.pop("codec", None)
        return await WebRtcStreamClient(url, start, codec=codec, open_timeout_s=open_timeout_s).connect()
    raise ValueError(f"transport must be ws or webrtc, not {transport!r}")
