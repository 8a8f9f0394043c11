"""`TransportContext`: what every transport endpoint shares (engine, settings, sessions, encoder pool)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from streamer.engine_api import EngineAPI
from streamer.transport.registry import SessionRegistry
from streamer.transport.settings import ServerSettings


@dataclass
class TransportContext:
    engine: EngineAPI
    settings: ServerSettings
    registry: SessionRegistry
    executor: ThreadPoolExecutor  # JPEG / frame conversion; never on the event loop
    peers: dict[str, Any] = field(default_factory=dict)  # session id -> webrtc PeerSession
    draining: bool = False

    @classmethod
    def create(cls, engine: EngineAPI, settings: ServerSettings) -> TransportContext:
        return cls(
            engine=engine,
            settings=settings,
            registry=SessionRegistry(engine, settings.close_timeout_s),
            executor=ThreadPoolExecutor(settings.encode_workers, thread_name_prefix="streamer-encode"),
        )
