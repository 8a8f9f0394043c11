"""`SessionRegistry`: the sessions opened through the transports, their tokens and listeners.

The engine gets one sink per session, a `SessionFanout`; the connection that opened the session
(its owner) and any connection that attached with the token subscribe to it. The registry is
shared by the WebSocket and WebRTC transports, so a session started over WebRTC (or WHEP) can
be controlled from a WebSocket that presents its token.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from dataclasses import dataclass

from streamer import metrics
from streamer.engine_api import ChunkSink, EngineAPI, SessionHandle
from streamer.events import Chunk, Refused
from streamer.protocol import StartMessage

log = logging.getLogger(__name__)


class SessionFanout:
    """The engine's sink for one session: forwards to every subscriber (owner first)."""

    def __init__(self, owner: ChunkSink) -> None:
        self.subscribers: list[ChunkSink] = [owner]

    def on_chunk(self, chunk: Chunk) -> None:
        for sink in self.subscribers:
            sink.on_chunk(chunk)

    def on_event(self, event: dict) -> None:
        for sink in list(self.subscribers):
            sink.on_event(event)


@dataclass
class TransportSession:
    handle: SessionHandle
    fanout: SessionFanout
    transport: str
    start: StartMessage
    closed: bool = False

    @property
    def id(self) -> str:
        return self.handle.id


class Unauthorized(Exception):
    """Unknown session id, or a token that does not match."""


class SessionRegistry:
    def __init__(self, engine: EngineAPI, close_timeout_s: float = 5.0) -> None:
        self.engine = engine
        self.close_timeout_s = close_timeout_s
        self.sessions: dict[str, TransportSession] = {}

    async def open(self, params: StartMessage, owner: ChunkSink, transport: str) -> TransportSession:
        """Admit a session whose output goes to `owner`; raises `events.Refused`."""
        fanout = SessionFanout(owner)
        try:
            handle = await self.engine.open_session(params, fanout)
        except Refused:
            metrics.SESSIONS_REFUSED.inc()
            raise
        session = TransportSession(handle, fanout, transport, params)
        self.sessions[handle.id] = session
        log.info("session %s opened over %s", handle.id, transport)
        return session

    def get(self, session_id: str) -> TransportSession | None:
        return self.sessions.get(session_id)

    def authorize(self, session_id: str, token: str) -> TransportSession:
        """The live session `session_id` if `token` is its token, else `Unauthorized`."""
        session = self.sessions.get(session_id)
        if session is None or session.closed:
            raise Unauthorized("unknown session or wrong token")
        if not hmac.compare_digest(session.handle.token.encode(), token.encode()):
            raise Unauthorized("unknown session or wrong token")
        return session

    def subscribe(self, session: TransportSession, sink: ChunkSink) -> None:
        session.fanout.subscribers.append(sink)

    def unsubscribe(self, session: TransportSession, sink: ChunkSink) -> None:
        if sink in session.fanout.subscribers:
            session.fanout.subscribers.remove(sink)

    async def close(self, session_id: str, reason: str) -> bool:
        """Close a session in the engine (bounded by `close_timeout_s`); False if already closed."""
        session = self.sessions.pop(session_id, None)
        if session is None or session.closed:
            return False
        session.closed = True
        try:
            async with asyncio.timeout(self.close_timeout_s):
                await self.engine.close_session(session_id, reason)
        except TimeoutError:
            log.error("engine.close_session(%s) took over %.1fs", session_id, self.close_timeout_s)
        except Exception:
            log.exception("engine.close_session(%s) failed", session_id)
        log.info("session %s closed: %s", session_id, reason)
        return True

    def forget(self, session_id: str) -> None:
        """Drop a session the engine ended by itself (it sent `ended`)."""
        session = self.sessions.pop(session_id, None)
        if session is not None:
            session.closed = True

    async def close_all(self, reason: str) -> None:
        await asyncio.gather(*(self.close(sid, reason) for sid in list(self.sessions)))
