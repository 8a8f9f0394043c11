"""`FakeEngine`: an `EngineAPI` that streams solid-colour chunks, for transport tests.

Each session's colour is a hash of its prompt (so a redirect visibly changes the pixels), the
chunk rate honours fps with an asyncio task per session, sessions beyond `max_sessions` are
refused, and actions outside `actions` raise `ControlError`. Everything it did is recorded in
plain attributes for the tests to inspect.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
import uuid
from dataclasses import dataclass, field

import numpy as np

from streamer.engine_api import ChunkSink, SessionHandle
from streamer.events import Chunk, ControlError, Refused
from streamer.protocol import ControlMessage, StartMessage

KNOWN_WORDS = {"red", "green", "blue", "ball", "square", "sky", "a", "the", "over", "grass"}


def prompt_colour(prompt: str) -> tuple[int, int, int]:
    """Stable, well separated colour for a prompt (channels in {16, 80, ..., 240})."""
    digest = hashlib.sha256(prompt.encode()).digest()
    return tuple(16 + 32 * (b % 8) for b in digest[:3])  # type: ignore[return-value]


@dataclass
class FakeSession:
    handle: SessionHandle
    sink: ChunkSink
    prompt: str
    scene: str | None
    task: asyncio.Task | None = None
    chunk_index: int = 0
    paused: bool = False
    prompt_version: int = 0
    controls: list = field(default_factory=list)


class FakeEngine:
    def __init__(
        self,
        fps: float = 30.0,
        frames_per_chunk: int = 4,
        width: int = 64,
        height: int = 64,
        max_sessions: int = 4,
        actions: frozenset[str] = frozenset({"none", "left", "right", "up", "down"}),
        noise: bool = False,
    ) -> None:
        self.fps, self.frames_per_chunk, self.width, self.height = fps, frames_per_chunk, width, height
        self.max_sessions = max_sessions
        self.actions = actions
        self.noise = noise  # random pixels (defeats JPEG compression: for slow-consumer tests)
        self.sessions: dict[str, FakeSession] = {}
        self.closed: dict[str, str] = {}  # session id -> reason
        self.chunks_made = 0
        self.started = False
        self.stopped = False

    async def start(self) -> None:
        self.started = True

    def ready(self) -> bool:
        return self.started and not self.stopped

    def info(self) -> dict:
        return {
            "model": {"name": "fake", "frames_per_chunk": self.frames_per_chunk,
                      "height": self.height, "width": self.width},
            "fps": self.fps,
            "capacity": {"max_sessions": self.max_sessions},
            "sessions": len(self.sessions),
        }  # fmt: skip

    async def open_session(self, params: StartMessage, sink: ChunkSink) -> SessionHandle:
        if len(self.sessions) >= self.max_sessions:
            raise Refused(f"capacity: {len(self.sessions)}/{self.max_sessions} sessions in use", None)
        handle = SessionHandle(
            str(uuid.uuid4()),
            secrets.token_urlsafe(16),
            self.fps,
            self.frames_per_chunk,
            self.width,
            self.height,
        )
        session = FakeSession(handle, sink, params.prompt, params.scene)
        session.task = asyncio.create_task(self._run(session))
        self.sessions[handle.id] = session
        return handle

    async def _run(self, s: FakeSession) -> None:
        period = self.frames_per_chunk / self.fps
        loop = asyncio.get_running_loop()
        next_t = loop.time()
        rng = np.random.default_rng(0)
        while True:
            next_t += period
            await asyncio.sleep(max(0.0, next_t - loop.time()))
            if s.paused:
                continue
            shape = (self.frames_per_chunk, self.height, self.width, 3)
            if self.noise:
                frames = rng.integers(0, 256, shape, dtype=np.uint8)
            else:
                frames = np.empty(shape, dtype=np.uint8)
                frames[...] = prompt_colour(s.prompt)
            chunk = Chunk(
                s.handle.id, s.chunk_index, s.chunk_index * self.frames_per_chunk, frames, time.time(),
                self.fps, s.prompt_version,
            )  # fmt: skip
            s.chunk_index += 1
            self.chunks_made += 1
            s.sink.on_chunk(chunk)  # must return at once, whatever the client does

    async def control(self, session_id: str, msg: ControlMessage) -> dict:
        s = self.sessions[session_id]
        s.controls.append(msg)
        if msg.type == "prompt":
            s.prompt, s.prompt_version = msg.prompt, s.prompt_version + 1
            unknown = [w for w in msg.prompt.lower().split() if w not in KNOWN_WORDS]
            return {"type": "prompt", "unknown_words": unknown, "applies_from_chunk": s.chunk_index}
        if msg.type == "action" and msg.action not in self.actions:
            raise ControlError("action", f"this scene takes {sorted(self.actions)}")
        if msg.type in ("pause", "resume"):
            s.paused = msg.type == "pause"
        return {"type": msg.type, "applies_from_chunk": s.chunk_index}

    async def close_session(self, session_id: str, reason: str) -> None:
        s = self.sessions.pop(session_id, None)
        if s is None:
            return
        self.closed[session_id] = reason
        if s.task is not None:
            s.task.cancel()

    async def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        for sid in list(self.sessions):
            s = self.sessions[sid]
            await self.close_session(sid, "shutdown")
            s.sink.on_event({"type": "ended", "reason": "shutdown"})
