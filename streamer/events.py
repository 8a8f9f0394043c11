"""Plain data that flows from the engine to transports: finished chunks and the errors it raises.

Transports and the engine both import this module; it imports neither.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Chunk:
    """One finished chunk of a session's stream, ready to be paced out to a client."""

    session_id: str
    chunk_index: int
    first_frame: int  # index of frames[0] in the session's stream
    frames: np.ndarray  # (F, H, W, 3) uint8
    capture_ts: float  # time.time() when the chunk finished decoding
    fps: float  # the rate the frames are meant to be played at (may be lowered under overload)
    prompt_version: int = 0  # how many redirects the chunk's conditioning reflects


class Refused(Exception):
    """Admission control refused a session; `reason` names the figures."""

    def __init__(self, reason: str, queue_position: int | None = None):
        super().__init__(reason)
        self.reason = reason
        self.queue_position = queue_position


class ControlError(Exception):
    """A control message was rejected; `field` names the offending field."""

    def __init__(self, field: str, message: str, code: str = "invalid_field"):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message
        self.code = code


@dataclass
class SessionEvent:
    """A JSON-able event for one session (ended, error, prompt accepted, stats)."""

    session_id: str
    payload: dict = field(default_factory=dict)
