"""The engine as transports see it: `EngineAPI`, `SessionHandle` and `ChunkSink`.

Transports (`streamer/transport/`) program against these types only, so they can be tested with a
fake engine and the real one (`streamer/engine.py`) plugs in unchanged. This module imports no
transport and no torch.

Contract (what an implementation must do):

- `open_session(params, sink)` admits a stream or raises `events.Refused(reason, queue_position)`.
  The returned handle's `id` is a UUID string (`str(uuid.uuid4())`): the binary chunk header
  carries it as 16 raw bytes. `token` is an unguessable secret (e.g. `secrets.token_urlsafe(16)`).
- `sink.on_chunk(chunk)` and `sink.on_event(event)` are called on the event-loop thread (use
  `loop.call_soon_threadsafe` from the model thread). They never block and never raise; a sink
  copes with a slow client by dropping, the engine never waits for a sink.
- `on_event` dicts have a `"type"`: `"ended"` (with `"reason"`; the last thing a sink receives),
  `"error"` (engine-side failure: `"code"`, `"message"`), `"stats"` (free-form figures).
- `control(session_id, msg)` applies a control message (prompt, action, control, seed, pause,
  resume) from the next chunk on, and returns an ack payload dict (e.g. `{"type": "prompt",
  "unknown_words": [...], "applies_from_chunk": 12}`); it raises `events.ControlError(field,
  message, code)` to reject one, and `KeyError` for an unknown session.
- `close_session(session_id, reason)` frees the session and its cache slot; closing an unknown
  or already closed session is a no-op.
- `stop()` ends every session (each sink gets `{"type": "ended", "reason": "shutdown"}`) and is
  idempotent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from streamer import events
    from streamer.protocol import ControlMessage, StartMessage


@dataclass(frozen=True)
class SessionHandle:
    """What the engine tells a transport about an admitted session."""

    id: str  # UUID string
    token: str  # secret that lets another connection control this session
    fps: float
    frames_per_chunk: int
    width: int
    height: int


@runtime_checkable
class ChunkSink(Protocol):
    """Where the engine delivers one session's output. Called on the loop thread; never blocks."""

    def on_chunk(self, chunk: events.Chunk) -> None: ...

    def on_event(self, event: dict) -> None: ...


@runtime_checkable
class EngineAPI(Protocol):
    """The engine surface used by `streamer/transport/`."""

    async def start(self) -> None:
        """Start the model thread (called once by the app's lifespan before serving)."""
        ...

    async def open_session(self, params: StartMessage, sink: ChunkSink) -> SessionHandle: ...

    async def control(self, session_id: str, msg: ControlMessage) -> dict: ...

    async def close_session(self, session_id: str, reason: str) -> None: ...

    def info(self) -> dict:
        """`{"model": {...spec...}, "fps": ..., "capacity": {...}, "sessions": N}`, JSON-able."""
        ...

    def ready(self) -> bool: ...

    async def stop(self) -> None: ...
