"""Prometheus metrics of the server, in one module-level registry served at `/metrics`.

Who updates what:
- the engine (`streamer/engine.py`): `SESSIONS_ACTIVE`, `BATCH_SIZE`, `STEP_SECONDS` (both by batch
  kind: `denoise` or `commit`), `SCHEDULER_SECONDS` (its planning and bookkeeping between batches),
  `QUEUE_DELAY`, `CHUNK_LATENCY`, `CHUNK_SLACK`, `CHUNKS`, `DEADLINE_MISSES`;
- the transports (`streamer/transport/`): `SESSIONS_REFUSED` (every `Refused` reaches a transport),
  `FRAMES_SENT`, `FRAMES_DROPPED`, `CONTROL_ERRORS`, `CONNECTIONS`.
The process collector adds `process_resident_memory_bytes` and `process_open_fds` (soak tests).
"""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from scheduler.types import KINDS

REGISTRY = CollectorRegistry(auto_describe=True)
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# ---- engine side ----
SESSIONS_ACTIVE = Gauge(
    "streamer_sessions_active", "Sessions admitted and not yet closed.", registry=REGISTRY
)
BATCH_SIZE = Histogram(
    "streamer_batch_size",
    "Sessions in each model batch, by batch kind (denoise, commit).",
    ["kind"],
    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64),
    registry=REGISTRY,
)
STEP_SECONDS = Histogram(
    "streamer_step_seconds",
    "Wall time of one batched model step (what the cost model learns), by batch kind.",
    ["kind"],
    buckets=_SECONDS,
    registry=REGISTRY,
)
SCHEDULER_SECONDS = Histogram(
    "streamer_scheduler_seconds",
    "The scheduler's own time per call on the model thread: planning a batch or booking its result.",
    ["phase"],
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025),
    registry=REGISTRY,
)
QUEUE_DELAY = Histogram(
    "streamer_queue_delay_seconds",
    "Time a chunk job waited before its first denoising step.",
    buckets=_SECONDS,
    registry=REGISTRY,
)
CHUNK_LATENCY = Histogram(
    "streamer_chunk_latency_seconds",
    "Time from a chunk job's creation to its decoded frames.",
    buckets=_SECONDS,
    registry=REGISTRY,
)
CHUNK_SLACK = Histogram(
    "streamer_chunk_slack_seconds",
    "Playback deadline minus finish time of each chunk after a session's first (negative: late).",
    buckets=(-1.0, -0.25, -0.1, -0.025, 0.0, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
    registry=REGISTRY,
)
DEGRADE_LEVEL = Gauge(
    "streamer_degrade_level",
    "The overload policy's level: 0 is full quality; each level is one denoising step fewer or a "
    "chunk period stretched by the scheduler's stretch_step, for every session alike.",
    registry=REGISTRY,
)
CHUNKS = Counter("streamer_chunks", "Chunks finished (denominator of the miss rate).", registry=REGISTRY)
DEADLINE_MISSES = Counter(
    "streamer_deadline_misses", "Chunks finished after their playback deadline.", registry=REGISTRY
)

# ---- transport side ----
SESSIONS_REFUSED = Counter("streamer_sessions_refused", "Sessions refused by admission.", registry=REGISTRY)
FRAMES_SENT = Counter(
    "streamer_frames_sent", "Frames handed to a client connection.", ["transport"], registry=REGISTRY
)
FRAMES_DROPPED = Counter(
    "streamer_frames_dropped",
    "Frames dropped for a slow client (latest-frame-wins).",
    ["transport"],
    registry=REGISTRY,
)
CONTROL_ERRORS = Counter(
    "streamer_control_errors",
    "Client messages answered with an error.",
    ["transport", "code"],
    registry=REGISTRY,
)
CONNECTIONS = Gauge(
    "streamer_connections_active", "Open client connections.", ["transport"], registry=REGISTRY
)

# Labelled series exist only once a label value is used; the engine's are known in advance, so
# they are created now, and a dashboard sees zeros before the first batch instead of no series.
for _kind in KINDS:
    BATCH_SIZE.labels(_kind)
    STEP_SECONDS.labels(_kind)
for _phase in ("schedule", "update"):
    SCHEDULER_SECONDS.labels(_phase)
