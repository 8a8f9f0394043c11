"""`ControlChannel`: one connection's JSON control messages -> engine calls -> JSON replies.

Both transports use it (the WebSocket's text messages, the WebRTC `control` data channel), so a
message means the same thing on either. Every rejected message is answered with an `error`
event naming the field; nothing a client sends can raise out of `handle()`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Literal

from streamer import metrics
from streamer.events import ControlError
from streamer.protocol import (
    ENGINE_CONTROL_TYPES,
    AttachedEvent,
    AttachMessage,
    EndedEvent,
    PongEvent,
    ProtocolError,
    StartMessage,
    parse_control,
)
from streamer.transport.registry import SessionRegistry, TransportSession, Unauthorized

log = logging.getLogger(__name__)

StartHook = Callable[[StartMessage], Awaitable[None]]
AttachHook = Callable[[TransportSession], None]


class ControlChannel:
    def __init__(
        self,
        registry: SessionRegistry,
        transport: str,
        reply: Callable[[dict], None],
        on_start: StartHook | None = None,
        on_attach: AttachHook | None = None,
        session: TransportSession | None = None,
    ) -> None:
        self.registry = registry
        self.transport = transport
        self.reply = reply
        self.on_start = on_start
        self.on_attach = on_attach
        self.session = session
        self.role: Literal["owner", "controller"] | None = "owner" if session else None

    def error(self, code: str, message: str, field: str | None = None, msg_id: object = None) -> None:
        metrics.CONTROL_ERRORS.labels(self.transport, code).inc()
        self.reply(ProtocolError(code, message, field, msg_id).event())

    async def handle(self, raw: str | bytes) -> None:
        """Apply one client message; answers errors itself."""
        try:
            msg = parse_control(raw)
        except ProtocolError as exc:
            metrics.CONTROL_ERRORS.labels(self.transport, exc.code).inc()
            self.reply(exc.event())
            return
        try:
            await self._dispatch(msg)
        except Exception as exc:  # an engine bug must not take the connection down
            log.exception("control message %s failed", msg.type)
            self.error("internal", f"server error: {type(exc).__name__}", None, msg.id)

    async def _dispatch(self, msg) -> None:
        if msg.type == "ping":
            self.reply(PongEvent(t=msg.t, server_ts=time.time(), id=msg.id).model_dump())
        elif msg.type in ("start", "attach") and self.session is not None:
            self.error("already_started", "this connection already has a session", "type", msg.id)
        elif msg.type == "start":
            if self.on_start is None:
                self.error("not_allowed", f"`start` is not accepted over {self.transport}", "type", msg.id)
            else:
                await self.on_start(msg)
        elif msg.type == "attach":
            self._attach(msg)
        elif self.session is None or self.session.closed:
            self.error("not_started", "send `start` or `attach` first", "type", msg.id)
        elif msg.type == "stop":
            await self.stop("stopped")
        elif msg.type in ENGINE_CONTROL_TYPES:
            await self._control(msg)

    def _attach(self, msg: AttachMessage) -> None:
        try:
            session = self.registry.authorize(msg.session_id, msg.token)
        except Unauthorized as exc:
            self.error("unauthorized", str(exc), "token", msg.id)
            return
        self.session, self.role = session, "controller"
        if self.on_attach is not None:
            self.on_attach(session)
        h = session.handle
        self.reply(
            AttachedEvent(
                session_id=h.id,
                fps=h.fps,
                frames_per_chunk=h.frames_per_chunk,
                width=h.width,
                height=h.height,
            ).model_dump()
        )

    async def _control(self, msg) -> None:
        assert self.session is not None
        try:
            result = await self.registry.engine.control(self.session.id, msg)
        except ControlError as exc:
            self.error(exc.code, exc.message, exc.field, msg.id)
            return
        except KeyError:
            self.error("not_found", "the session has ended", "type", msg.id)
            return
        ack = dict(result or {})
        ack.setdefault("type", msg.type)
        if msg.id is not None:
            ack["id"] = msg.id
        self.reply(ack)

    async def stop(self, reason: str) -> None:
        """End the session for everyone listening to it (owner and controllers get `ended`)."""
        session = self.session
        if session is None or session.closed:
            return
        await self.registry.close(session.id, reason)
        session.fanout.on_event(EndedEvent(reason=reason).model_dump())
