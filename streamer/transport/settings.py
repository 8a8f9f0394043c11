"""Server settings for the transports (the engine has its own config)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

WEB_DIR = Path(__file__).resolve().parents[2] / "web"


@dataclass
class ServerSettings:
    web_dir: Path = WEB_DIR
    # WebSocket
    send_queue_chunks: int = 4  # per client; when full the oldest chunk is dropped (latest wins)
    start_timeout_s: float = 30.0  # a connection must send start/attach within this
    stats_interval_s: float = 5.0  # transport stats event period (0 = never)
    ws_max_size: int = 1024 * 1024  # uvicorn hard cap (1009); the protocol limit is 64 KiB
    ws_ping_interval_s: float = 5.0  # a silent peer is dropped after interval + timeout
    ws_ping_timeout_s: float = 5.0
    # Sessions
    close_timeout_s: float = 5.0  # how long engine.close_session may take on disconnect
    # WebRTC
    video_codec: str = "h264"  # "h264" or "vp8"; an offer may override it
    video_bitrate: int = 1_000_000  # start bitrate (bps); congestion control moves it
    video_max_bitrate: int = 3_000_000
    ice_servers: list[str] = field(default_factory=list)  # empty: host candidates only (loopback/LAN)
    ice_connect_timeout_s: float = 15.0  # an answered peer must connect within this
    # Encoding
    encode_workers: int = 2
