"""Latency soak: N user-like clients against a `streamer` server for a set time.

    python benchmarks/soak.py --sessions 4 --seconds 60 --transport mix --server-args "--config tiny-random" --json
    python benchmarks/soak.py --sessions 8 --seconds 600 --transport ws --url http://127.0.0.1:8000

Without `--url` it starts its own `streamer serve` (with `--server-args`) on a free port and
stops it at the end. Each client is one user: it starts a session with a random prompt from
the embedded model's vocabulary (scenes cycle game, avatar, story), sends game actions or
avatar controls at a steady rate (`--action-hz`), and redirects at random intervals (mean
`--redirect-every`). With `--churn S`, users also leave after about S seconds and start anew.

What it records, and how (see docs/benchmarks.md for the definitions):
- TTFF: connect call to the first decoded frame.
- Frame intervals as a player shows them: WebSocket frames played out at the session fps, each
  at max(arrival, previous + 1/fps); WebRTC frames that carry new content (the server's track
  repeats the last frame when the next is late, so repeats are not counted as frames).
  Stalls: intervals over two frame intervals; `stalls_per_min` is per session-minute.
- Server deadline misses, chunks, refusals, dropped frames: deltas of `/metrics` over the run.
- Client drops: frames the client library discarded plus (WebSocket) gaps in frame indices.
- Glass-to-glass: a chunk's first frame received minus its capture timestamp (same host).
- Action-to-effect (game sessions): action sent to the first frame whose character centroid
  steps that way (`evaluate.character_centroid`). Only for streams the evaluator can read
  (background and character found in most early frames); null otherwise, e.g. tiny-random.
- Server RSS and open fds from `/metrics` every `--sample-every` s; slopes by least squares
  over the steady part (after the ramp and a warm-up).

Writes `benchmarks/results/soak-<name>.json` and `.png` (soak_report.py), shows a progress bar on stderr, and
prints one JSON object (the contract for outside tools) as its last stdout line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import shlex
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, ServerProcess, scrape  # noqa: E402
from benchmarks.soak_report import details, plot, summarise  # noqa: E402
from streamer.client import Frame, StreamClient, StreamError, connect  # noqa: E402
from streamer.models.embedded import vocab  # noqa: E402
from streamer.models.embedded.evaluate import background_of, character_centroid  # noqa: E402
from streamer.models.embedded.scenery import scale_of, wall_width  # noqa: E402

SCENES = ("game", "avatar", "story")  # user i plays SCENES[i % 3]
DIRECTIONS = {"left": (0, -1), "right": (0, 1), "up": (1, -1), "down": (1, 1)}  # action -> (axis, sign)
TRANSITIONS = ("blend", "blend", "cut", "recache")


@dataclass
class SoakConfig:
    sessions: int = 4
    seconds: float = 60.0
    transport: str = "ws"  # ws | webrtc | mix (alternating, user 0 on ws)
    url: str | None = None
    server_args: str = ""
    name: str | None = None
    out_dir: Path = RESULTS
    seed: int = 0
    ramp_s: float | None = None  # None: min(5 s, a tenth of the run)
    action_hz: float = 1.0
    redirect_every_s: float = 10.0
    churn_s: float = 0.0  # mean session lifetime; 0: every user keeps one session to the end
    sample_every_s: float = 2.0
    codec: str | None = None
    open_timeout_s: float = 20.0
    plot: bool = True
    progress: bool = True

    def transport_of(self, user: int) -> str:
        if self.transport == "mix":
            return "ws" if user % 2 == 0 else "webrtc"
        return self.transport

    @property
    def ramp(self) -> float:
        return self.ramp_s if self.ramp_s is not None else min(5.0, self.seconds / 10)


class GameProbe:
    """Action-to-effect for one game session, read from the pixels with the model's evaluator."""

    READ_FRAMES = 12  # frames used to decide whether the evaluator can read this stream

    def __init__(self, color: str, background: str) -> None:
        self.color, self.background = color, background
        self.readable: bool | None = None
        self._checks: list[bool] = []
        self._last: tuple[float, float] | None = None
        self._pending: tuple[float, int, int] | None = None  # (sent at, axis, sign)
        self._size = 0
        self.latencies: list[tuple[float, float]] = []  # (sent at, seconds)
        self.unanswered = 0
        self.held = "none"  # the action in force

    def on_frame(self, frame: Frame) -> None:
        if self.readable is False:
            return
        image = frame.image
        self._size = image.shape[0]
        centre = character_centroid(image, self.color)
        if self.readable is None:
            self._checks.append(centre is not None and background_of(image) == self.background)
            if len(self._checks) >= self.READ_FRAMES:
                self.readable = float(np.mean(self._checks)) >= 0.75
        elif self._pending is not None and centre is not None and self._last is not None:
            sent, axis, sign = self._pending
            step = (centre[axis] - self._last[axis]) * sign
            if frame.recv_ts >= sent and step > 1.5 * scale_of(self._size):
                self.latencies.append((sent, frame.recv_ts - sent))
                self._pending = None
        self._last = centre

    def choose(self, rng: np.random.Generator) -> str:
        """A new direction (not the one held: that motion would read as an instant response)
        that the character can move in from where it is (not into a wall)."""
        others = [a for a in DIRECTIONS if a != self.held]
        if not self.readable or self._last is None:
            return str(rng.choice(others))
        s = scale_of(self._size)
        lo, hi = wall_width(self._size) + 13 * s, self._size - wall_width(self._size) - 13 * s
        free = [a for a in others if (DIRECTIONS[a][1] < 0 and self._last[DIRECTIONS[a][0]] > lo)
                or (DIRECTIONS[a][1] > 0 and self._last[DIRECTIONS[a][0]] < hi)]  # fmt: skip
        return str(rng.choice(free)) if free else "none"

    def sent(self, action: str, at: float) -> None:
        self.expire()
        self.held = action
        if self.readable and action in DIRECTIONS:
            self._pending = (at, *DIRECTIONS[action])

    def expire(self) -> None:
        if self._pending is not None:
            self.unanswered += 1
            self._pending = None


@dataclass
class SessionRecord:
    user: int
    transport: str
    scene: str
    prompt: str
    t_connect: float
    fps: float = 0.0
    frames_per_chunk: int = 1
    session_id: str | None = None
    frames: int = 0
    ttff_s: float | None = None
    dropped: int = 0  # client library drops + WebSocket frame-index gaps
    stalls: int = 0
    streamed_s: float = 0.0
    ended: str | None = None  # the server's reason, if it ended before we closed it
    to_end: bool = False
    probe: GameProbe | None = None
    _last_recv: float | None = None
    _last_shown: float | None = None
    _next_index: int | None = None
    _since_first: int = 1 << 30


@dataclass
class Recorder:
    t0: float  # time.time() at the start
    intervals: list[tuple[float, float]] = field(default_factory=list)  # (t, s), player view
    arrivals: list[float] = field(default_factory=list)  # raw arrival gaps, s
    g2g: list[tuple[float, float]] = field(default_factory=list)
    ttff: list[float] = field(default_factory=list)
    sessions: list[SessionRecord] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    refusals: list[str] = field(default_factory=list)
    active: int = 0
    frames: int = 0

    def error(self, where: str, what: object) -> None:
        self.errors.append(f"{where}: {what}")

    def on_frame(self, rec: SessionRecord, frame: Frame) -> None:
        t = frame.recv_ts
        rec.frames += 1
        self.frames += 1
        if rec.ttff_s is None:
            rec.ttff_s = t - rec.t_connect
            self.ttff.append(rec.ttff_s)
        if rec._last_recv is not None:
            self.arrivals.append(t - rec._last_recv)
        rec._last_recv = t
        if frame.first_in_chunk and frame.capture_ts is not None:
            self.g2g.append((t - self.t0, t - frame.capture_ts))
        if rec.transport == "ws":
            if (
                rec._next_index is not None
                and frame.frame_index is not None
                and frame.frame_index > rec._next_index
            ):
                rec.dropped += frame.frame_index - rec._next_index
            rec._next_index = None if frame.frame_index is None else frame.frame_index + 1
            shown = t if rec._last_shown is None else max(t, rec._last_shown + 1.0 / rec.fps)
        else:  # WebRTC: only frames with new content count; the track repeats when starved
            rec._since_first = 0 if frame.first_in_chunk else rec._since_first + 1
            if rec._since_first >= rec.frames_per_chunk:
                return
            shown = t
        if rec._last_shown is not None:
            gap = shown - rec._last_shown
            self.intervals.append((t - self.t0, gap))
            rec.stalls += gap > 2.0 / rec.fps
        rec._last_shown = shown


class Soak:
    def __init__(self, cfg: SoakConfig, url: str) -> None:
        self.cfg, self.url = cfg, url
        if cfg.transport != "ws":
            # aiortc and PyAV take about a second to import: not inside the first WebRTC user's
            # TTFF, and not on the event loop while other users' frames arrive.
            import streamer.client_webrtc  # noqa: F401
        self.rec = Recorder(time.time())
        self.start_mono = time.monotonic()
        self.stop_at = self.start_mono + cfg.seconds

    def rel(self) -> float:
        return time.monotonic() - self.start_mono

    # ---- one user ----
    async def user(self, i: int) -> None:
        cfg = self.cfg
        rng = np.random.default_rng([cfg.seed, i])
        await asyncio.sleep(cfg.ramp * i / max(1, cfg.sessions - 1) if cfg.sessions > 1 else 0.0)
        while time.monotonic() < self.stop_at - 1.0:
            leave_at = self.stop_at
            if cfg.churn_s > 0:
                leave_at = min(self.stop_at, time.monotonic() + max(5.0, rng.exponential(cfg.churn_s)))
            rec = await self.session(i, rng, leave_at)
            if rec is None or rec.ended is not None:
                return  # refused, failed to connect or lost: this user is done

    async def session(self, i: int, rng: np.random.Generator, leave_at: float) -> SessionRecord | None:
        cfg = self.cfg
        transport, scene = cfg.transport_of(i), SCENES[i % len(SCENES)]
        spec = vocab.random_spec(rng, scene)
        rec = SessionRecord(i, transport, scene, vocab.describe(spec), time.time())
        start: dict[str, Any] = {"prompt": rec.prompt, "seed": int(rng.integers(0, 2**31)), "scene": scene}
        if transport == "webrtc" and cfg.codec:
            start["codec"] = cfg.codec
        try:
            stream = await connect(self.url, transport, open_timeout_s=cfg.open_timeout_s, **start)
        except StreamError as exc:
            if exc.event and exc.event.get("type") == "refused":
                self.rec.refusals.append(str(exc.event.get("reason")))
            else:
                self.rec.error(f"user {i} connect", exc)
            return None
        except (OSError, TimeoutError, httpx.HTTPError, ValueError) as exc:
            self.rec.error(f"user {i} connect", f"{type(exc).__name__}: {exc}")
            return None
        rec.session_id = stream.session.get("session_id")
        rec.fps = float(stream.session.get("fps") or 24.0)
        rec.frames_per_chunk = int(stream.session.get("frames_per_chunk") or 1)
        if scene == "game":
            rec.probe = GameProbe(spec.character_color or vocab.DEFAULT_CHARACTER, spec.background)
        self.rec.sessions.append(rec)
        self.rec.active += 1
        began = time.monotonic()
        reader = asyncio.create_task(self.read(stream, rec))
        try:
            await self.drive(stream, rec, rng, spec, leave_at)
        except Exception as exc:  # a bug here must not hang the soak: record it and close
            self.rec.error(f"user {i} driver", f"{type(exc).__name__}: {exc}")
        finally:
            self.rec.active -= 1
            rec.streamed_s = time.monotonic() - began
            if stream.ended is not None:
                rec.ended = str(stream.ended.get("reason"))
                self.rec.error(f"user {i} session {rec.session_id}", f"ended early: {rec.ended}")
            else:
                rec.to_end = leave_at >= self.stop_at
            with contextlib.suppress(Exception):
                async with asyncio.timeout(10):
                    await stream.close()
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
            rec.dropped += stream.frames_dropped
            if rec.probe is not None:
                rec.probe.expire()
            self.collect_events(stream, rec)
        return rec

    async def read(self, stream: StreamClient, rec: SessionRecord) -> None:
        async for frame in stream.frames():
            self.rec.on_frame(rec, frame)
            if rec.probe is not None:
                rec.probe.on_frame(frame)

    def collect_events(self, stream: StreamClient, rec: SessionRecord) -> None:
        """Server errors nobody asked for (e.g. `model_error`); acks of our requests are checked
        where they are awaited. The client only appends to `events`, so draining it is safe."""
        while stream.events:
            event = stream.events.popleft()
            if event.get("type") == "error" and not str(event.get("id") or "").startswith("c"):
                self.rec.error(f"user {rec.user} session {rec.session_id}", f"server error event: {event}")

    async def drive(self, stream: StreamClient, rec: SessionRecord, rng: np.random.Generator,
                    spec: vocab.SceneSpec, leave_at: float) -> None:  # fmt: skip
        cfg = self.cfg
        now = time.monotonic()
        next_action = now + rng.uniform(0.5, 1.5) / cfg.action_hz
        next_redirect = now + rng.exponential(cfg.redirect_every_s)
        while stream.ended is None:
            now = time.monotonic()
            if now >= leave_at:
                return
            wake = min(next_action, next_redirect, leave_at, now + 1.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stream.ended_event.wait(), max(0.0, wake - now))
            self.collect_events(stream, rec)
            now = time.monotonic()
            if stream.ended is not None or now >= leave_at:
                return
            request = ""
            try:
                if now >= next_action:
                    next_action = now + 1.0 / cfg.action_hz
                    request = "action" if rec.scene == "game" else "control"
                    await self.act(stream, rec, rng)
                if now >= next_redirect:
                    next_redirect = now + rng.exponential(cfg.redirect_every_s)
                    spec = self.redirect_spec(rng, spec)
                    request = "prompt"
                    await stream.prompt(vocab.describe(spec), str(rng.choice(TRANSITIONS)))
            except (StreamError, TimeoutError) as exc:
                if stream.ended is None:  # a request cut short by the end is not its own error
                    what = f"{request}: {type(exc).__name__}: {exc}"
                    self.rec.error(f"user {rec.user} session {rec.session_id}", what)

    async def act(self, stream: StreamClient, rec: SessionRecord, rng: np.random.Generator) -> None:
        if rec.scene == "game":
            assert rec.probe is not None
            action = "none" if rng.random() < 0.1 else rec.probe.choose(rng)
            rec.probe.sent(action, time.time())
            await stream.action(action)
        elif rec.scene == "avatar":
            await stream.control(mouth=round(float(rng.random()), 3), eyes=float(rng.random() > 0.15))

    @staticmethod
    def redirect_spec(rng: np.random.Generator, spec: vocab.SceneSpec) -> vocab.SceneSpec:
        """A new scene of the same kind; a game keeps its character (the probe tracks its colour)."""
        new = vocab.random_spec(rng, spec.kind)
        if spec.kind == "game":
            return vocab.SceneSpec("game", new.background, character_color=spec.character_color)
        return new

    # ---- server samples and progress ----
    async def sample(self, http: httpx.AsyncClient) -> dict[str, Any] | None:
        m = await scrape(http, self.url)
        if m is None:
            return None
        s = {
            "t": round(self.rel(), 3),
            "clients_active": self.rec.active,
            "sessions_server": m.get("streamer_sessions_active"),
            "chunks": m.get("streamer_chunks_total", 0.0),
            "misses": m.get("streamer_deadline_misses_total", 0.0),
            "refused": m.get("streamer_sessions_refused_total", 0.0),
            "frames_dropped": m.get("streamer_frames_dropped_total", 0.0),
            "rss_mb": m["process_resident_memory_bytes"] / 2**20
            if "process_resident_memory_bytes" in m
            else None,
            "fds": m.get("process_open_fds"),
            "degrade_level": m.get("streamer_degrade_level"),
        }
        self.rec.samples.append(s)
        return s

    async def sampler(self, http: httpx.AsyncClient) -> None:
        while time.monotonic() < self.stop_at:
            await self.sample(http)
            await asyncio.sleep(min(self.cfg.sample_every_s, max(0.0, self.stop_at - time.monotonic())))

    async def ticker(self) -> None:
        bar = tqdm(total=round(self.cfg.seconds), unit="s", desc="soak", file=sys.stderr,
                   disable=not self.cfg.progress, mininterval=1.0, dynamic_ncols=True)  # fmt: skip
        try:
            while time.monotonic() < self.stop_at:
                await asyncio.sleep(1.0)
                last = self.rec.samples[-1] if self.rec.samples else {}
                bar.n = min(round(self.rel()), bar.total)
                bar.set_postfix(active=self.rec.active, frames=self.rec.frames, refused=len(self.rec.refusals),
                                errors=len(self.rec.errors), rss=f"{last.get('rss_mb') or 0:.0f}MB", refresh=False)  # fmt: skip
                bar.refresh()
        finally:
            bar.close()

    async def run(self) -> dict[str, Any]:
        cfg = self.cfg
        async with httpx.AsyncClient() as http:
            info = (await http.get(f"{self.url}/v1/info", timeout=10)).json()
            before = await self.sample(http)
            tasks = [asyncio.create_task(self.user(i)) for i in range(cfg.sessions)]
            side = [asyncio.create_task(self.sampler(http)), asyncio.create_task(self.ticker())]
            try:
                async with asyncio.timeout(cfg.seconds + 120):
                    await asyncio.gather(*tasks)
            except TimeoutError:
                self.rec.error("soak", "users did not finish in time")
            finally:
                for task in tasks + side:
                    task.cancel()
                await asyncio.gather(*tasks, *side, return_exceptions=True)
            steady_end = self.rel()
            # Let the server close the sessions and their peers (a WebRTC peer closes just after
            # its session), then take the "after" sample for the leak figures.
            for _ in range(50):
                after = await self.sample(http)
                if after is None or not after.get("sessions_server"):
                    break
                await asyncio.sleep(0.2)
            await asyncio.sleep(1.0)
            after = await self.sample(http) or after
        return summarise(cfg, self.url, info, self.rec, before, after, steady_end)


def run(cfg: SoakConfig) -> dict[str, Any]:
    """Run one soak (starting a server if `cfg.url` is None); write the JSON and PNG files."""
    cfg.name = cfg.name or f"{cfg.transport}-{cfg.sessions}x{round(cfg.seconds)}s"
    server = None if cfg.url else ServerProcess(shlex.split(cfg.server_args))
    url = cfg.url.rstrip("/") if cfg.url else server.start()  # type: ignore[union-attr]
    try:
        soak = Soak(cfg, url)
        result = asyncio.run(soak.run())
    finally:
        if server is not None:
            result_code = server.stop()
            if result_code not in (0, None):
                print(f"server exited with {result_code}; log: {server.log_path}", file=sys.stderr)
    extra = details(soak.rec)
    cfg.out_dir.mkdir(parents=True, exist_ok=True)
    out = cfg.out_dir / f"soak-{cfg.name}.json"
    result["json"] = str(out)
    if server is not None:
        result["server_log"] = str(server.log_path)
    if cfg.plot:
        result["plot"] = str(out.with_suffix(".png"))
        plot(out.with_suffix(".png"), result, extra)
    out.write_text(json.dumps({**result, **extra}, indent=1) + "\n")
    return result


def parse_args(argv: list[str] | None = None) -> tuple[SoakConfig, bool]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=4, help="concurrent users")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the run")
    ap.add_argument("--transport", choices=["ws", "webrtc", "mix"], default="ws")
    ap.add_argument("--url", help="server to soak (default: start `streamer serve` here)")
    ap.add_argument(
        "--server-args", default="", help='arguments for the server it starts, e.g. "--config tiny-random"'
    )
    ap.add_argument(
        "--name", help="results name: benchmarks/results/soak-<name>.json (default from the options)"
    )
    ap.add_argument("--out-dir", type=Path, default=RESULTS)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ramp", type=float, help="seconds over which users arrive (default min(5, seconds/10))")
    ap.add_argument("--action-hz", type=float, default=1.0, help="game actions / avatar controls per second")
    ap.add_argument("--redirect-every", type=float, default=10.0, help="mean seconds between redirects")
    ap.add_argument("--churn", type=float, default=0.0, help="mean session lifetime, s (0: no churn)")
    ap.add_argument("--sample-every", type=float, default=2.0, help="seconds between /metrics samples")
    ap.add_argument("--codec", choices=["h264", "vp8"], help="WebRTC codec (default: the server's)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument("--json", action="store_true", help="print only the JSON result line on stdout")
    a = ap.parse_args(argv)
    cfg = SoakConfig(
        sessions=a.sessions, seconds=a.seconds, transport=a.transport, url=a.url, server_args=a.server_args,
        name=a.name, out_dir=a.out_dir, seed=a.seed, ramp_s=a.ramp, action_hz=a.action_hz,
        redirect_every_s=a.redirect_every, churn_s=a.churn, sample_every_s=a.sample_every, codec=a.codec,
        plot=not a.no_plot, progress=not a.no_progress,
    )  # fmt: skip
    return cfg, a.json


def main(argv: list[str] | None = None) -> int:
    cfg, as_json = parse_args(argv)
    result = run(cfg)
    if not as_json:
        for key, value in result.items():
            if key != "error_samples":
                print(f"{key:>28}: {value}", file=sys.stderr)
    print(json.dumps(result), flush=True)
    return 0 if result["errors"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
