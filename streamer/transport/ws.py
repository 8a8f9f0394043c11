"""WebSocket transport: `/v1/stream`. JSON control in; binary chunk messages and JSON events out.

One connection = one receive loop (client messages -> `ControlChannel`) and one send loop
(the connection's `ClientQueue` -> the socket). The engine only ever touches the queue, so a
client that stops reading loses old chunks (counted) and never blocks the engine. Chunks are
encoded in the context's executor.

Close codes: 1000 after `ended`; 1008 no `start`/`attach` within `start_timeout_s`; 1009 message
over 64 KiB; 1011 server error; 1013 refused by admission; 1012 (uvicorn) server restarting.
A session is closed in the engine as soon as its owner's connection goes (bounded by
`close_timeout_s`); a peer that vanishes silently is detected by WebSocket pings
(`ws_ping_interval_s + ws_ping_timeout_s`, 10 s by default).
"""

from __future__ import annotations

import asyncio
import logging
import time

from fastapi import APIRouter, WebSocket, WebSocketDisconnect

from streamer import metrics
from streamer.events import Chunk, Refused
from streamer.protocol import (
    MAX_MESSAGE_BYTES,
    AdmittedEvent,
    RefusedEvent,
    StartedEvent,
    StartMessage,
    dump_event,
)
from streamer.transport.chunk_codec import encode_chunk
from streamer.transport.client_queue import ClientQueue, QueueClosed
from streamer.transport.context import TransportContext
from streamer.transport.control_channel import ControlChannel
from streamer.transport.registry import TransportSession

log = logging.getLogger(__name__)
router = APIRouter()
_CLOSE = "_close"  # internal outbox marker: close the socket after what is queued before it
_FLUSH_TIMEOUT_S = 2.0


def _too_large(raw: str | bytes) -> bool:
    if len(raw) > MAX_MESSAGE_BYTES:
        return True
    if isinstance(raw, str) and len(raw) * 4 > MAX_MESSAGE_BYTES:
        return len(raw.encode("utf-8", "surrogatepass")) > MAX_MESSAGE_BYTES
    return False


@router.websocket("/v1/stream")
async def stream(websocket: WebSocket) -> None:
    await websocket.accept()
    await WsConnection(websocket, websocket.app.state.ctx).run()


class WsConnection:
    def __init__(self, websocket: WebSocket, ctx: TransportContext) -> None:
        self.ws, self.ctx = websocket, ctx
        self.outbox = ClientQueue(
            ctx.settings.send_queue_chunks, on_drop=metrics.FRAMES_DROPPED.labels("ws").inc
        )
        self.channel = ControlChannel(
            ctx.registry, "ws", self.outbox.on_event, on_start=self._start, on_attach=self._attach
        )
        self.encoding, self.quality = "jpeg", 80
        self.frames_sent = 0
        self.closing = False

    async def run(self) -> None:
        metrics.CONNECTIONS.labels("ws").inc()
        sender = asyncio.create_task(self._send_loop())
        try:
            await self._receive_loop()
        except WebSocketDisconnect:
            pass
        finally:
            await self._finish(sender)
            metrics.CONNECTIONS.labels("ws").dec()

    def request_close(self, code: int, reason: str = "") -> None:
        self.closing = True
        self.outbox.on_event({"type": _CLOSE, "code": code, "reason": reason})

    # ---- client -> server ----
    async def _receive_loop(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ctx.settings.start_timeout_s
        while not self.closing:
            wait = None if self.channel.session else max(0.0, deadline - loop.time())
            try:
                async with asyncio.timeout(wait):
                    message = await self.ws.receive()
            except TimeoutError:
                self.channel.error("start_timeout", "no `start` or `attach` in time", "type")
                self.request_close(1008, "start timeout")
                return
            if message["type"] == "websocket.disconnect":
                return
            raw = message.get("text")
            if raw is None:
                raw = message.get("bytes") or b""
            if _too_large(raw):
                self.channel.error("too_large", f"messages are limited to {MAX_MESSAGE_BYTES} bytes")
                self.request_close(1009, "message too big")
                return
            await self.channel.handle(raw)

    async def _start(self, msg: StartMessage) -> None:
        try:
            if self.ctx.draining:
                raise Refused("server is shutting down")
            session = await self.ctx.registry.open(msg, self.outbox, "ws")
        except Refused as exc:
            self.outbox.on_event(
                RefusedEvent(reason=exc.reason, queue_position=exc.queue_position).model_dump()
            )
            self.request_close(1013, "refused")
            return
        self.encoding, self.quality = msg.encoding, msg.quality
        self.channel.session, self.channel.role = session, "owner"
        h = session.handle
        admitted = AdmittedEvent(
            session_id=h.id, token=h.token, fps=h.fps, frames_per_chunk=h.frames_per_chunk,
            width=h.width, height=h.height,
        )  # fmt: skip
        self.outbox.push_front(admitted.model_dump())  # before any event the engine sent meanwhile

    def _attach(self, session: TransportSession) -> None:
        self.outbox.accept_chunks = False  # a controller gets events, not video
        self.ctx.registry.subscribe(session, self.outbox)

    # ---- server -> client ----
    async def _send_loop(self) -> None:
        try:
            await self._send_items()
        except (WebSocketDisconnect, QueueClosed, OSError, RuntimeError):
            pass  # the peer went away (RuntimeError: send after close); the receive loop sees it too
        except Exception:
            log.exception("ws send loop failed")
            await self._close_socket(1011, "server error")

    async def _send_items(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.ctx.settings.stats_interval_s or None
        while True:
            try:
                async with asyncio.timeout(interval):
                    item = await self.outbox.get()
            except TimeoutError:
                await self._send_json(self._stats())
                continue
            if isinstance(item, Chunk):
                if self.frames_sent == 0:
                    await self._send_json(
                        StartedEvent(chunk_index=item.chunk_index, capture_ts=item.capture_ts).model_dump()
                    )
                data = await loop.run_in_executor(
                    self.ctx.executor, encode_chunk, item, self.encoding, self.quality
                )
                await self.ws.send_bytes(data)
                self.frames_sent += len(item.frames)
                metrics.FRAMES_SENT.labels("ws").inc(len(item.frames))
            elif item["type"] == _CLOSE:
                await self._close_socket(item["code"], item["reason"])
                return
            else:
                await self._send_json(item)
                if item["type"] == "ended":
                    if self.channel.role == "owner" and self.channel.session is not None:
                        self.ctx.registry.forget(self.channel.session.id)
                    await self._close_socket(1000, str(item.get("reason", ""))[:100])
                    return

    async def _send_json(self, event: dict) -> None:
        await self.ws.send_text(dump_event(event))

    async def _close_socket(self, code: int, reason: str) -> None:
        self.closing = True
        try:
            await self.ws.close(code, reason)
        except (WebSocketDisconnect, OSError, RuntimeError):
            pass

    def _stats(self) -> dict:
        return {
            "type": "stats", "source": "transport", "ts": time.time(), "frames_sent": self.frames_sent,
            "frames_dropped": self.outbox.frames_dropped, "events_dropped": self.outbox.events_dropped,
        }  # fmt: skip

    async def _finish(self, sender: asyncio.Task) -> None:
        """Free the session first, then let the send loop flush a requested close."""
        session, role = self.channel.session, self.channel.role
        if session is not None and role == "owner":
            await self.ctx.registry.close(session.id, "disconnected")
        elif session is not None:
            self.ctx.registry.unsubscribe(session, self.outbox)
        if self.closing and not sender.done():
            await asyncio.wait({sender}, timeout=_FLUSH_TIMEOUT_S)
        self.outbox.close()
        sender.cancel()
        await asyncio.gather(sender, return_exceptions=True)
