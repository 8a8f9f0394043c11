"""The engine: runs the scheduler's batches through the model on its own thread.

The asyncio side (transports) talks to the engine through `EngineAPI` methods that post
commands to the model thread and await their futures; the loop never blocks on torch.
The model thread loops: apply pending commands (controls first: they pre-empt queued work),
ask the scheduler for the next plan, gather the batch's latents, conditioning and cache slots,
run one model call, scatter the results back to the sessions, report the measured time to the
scheduler's cost model, and hand finished chunks to their sinks on the loop thread.

A failing batch fails only its own sessions (error event, slot freed); the others go on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import logging
import queue
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from scheduler import Admission, SchedulerConfig, SessionSpec, StepPlan, StepResult
from scheduler.base import SchedulerBase

from . import metrics
from .calibration import calibrate
from .engine_api import ChunkSink, SessionHandle
from .events import Chunk, Refused
from .models.base import CausalVideoModel, Conditioning, PromptCond
from .models.device import synchronize
from .openmp import release_caller_pool
from .prompt_cache import PromptCache
from .protocol import ControlMessage, StartMessage
from .session import Session, SessionState
from .session_control import apply_control

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineConfig:
    max_sessions: int = 8
    steps: int | None = None  # None: the model's default
    fps: float | None = None  # None: the model's fps, or what `fps_sessions` sessions hold together
    fps_sessions: int = 1  # without `fps`: serve the highest rate this many sessions hold at once
    scheduler: str = "deadline"  # or "serial": the one-stream-at-a-time baseline
    utilisation_bound: float = 0.85
    sampler: str = "euler"
    blend_chunks: int = 2
    calibrate: bool = True
    degrade: bool = True  # the scheduler's fair overload policy (off in equality tests)
    # Acceleration techniques (docs/caching.md), off by default: the measured figures do not
    # justify either yet. The model rejects one it does not support when the engine is built.
    step_reuse: float | None = None  # step-reuse threshold; None: every step runs every block
    commit_reuse: bool = False
    default_prompt: str = "a red ball moving right on grass"

    def __post_init__(self) -> None:
        if not 1 <= self.fps_sessions <= self.max_sessions:
            raise ValueError(f"fps_sessions must be in 1..max_sessions ({self.max_sessions}), got {self.fps_sessions}")


def make_scheduler(cfg: EngineConfig, max_batch: int) -> SchedulerBase:
    from scheduler import CostModel, SerialScheduler, StepScheduler

    sched_cfg = SchedulerConfig(
        max_batch=max_batch, max_sessions=cfg.max_sessions, utilisation_bound=cfg.utilisation_bound,
        degrade=cfg.degrade,
    )
    if cfg.scheduler == "deadline":
        return StepScheduler(sched_cfg, CostModel())
    if cfg.scheduler == "serial":
        return SerialScheduler(sched_cfg, CostModel())
    raise ValueError(f"scheduler must be 'deadline' or 'serial', got {cfg.scheduler!r}")


class Engine:
    def __init__(self, model: CausalVideoModel, config: EngineConfig | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 calibration: Mapping[tuple[str, int], float] | None = None):
        """`calibration`: seconds per (kind, batch size) measured earlier on this machine (another
        engine's `calibration`), used instead of a start-up run, so that engines built one after
        the other (a benchmark's modes) share one cost model and one served fps."""
        self.model, self.cfg, self.clock = model, config or EngineConfig(), clock
        model.configure_caching(self.cfg.step_reuse, self.cfg.commit_reuse)
        self.spec = model.spec
        self.fps = self.cfg.fps or self.spec.fps
        self.steps = self.cfg.steps or self.spec.default_steps
        self.pool = model.new_pool(self.cfg.max_sessions)
        self.scheduler = make_scheduler(self.cfg, min(self.spec.max_batch, self.cfg.max_sessions))
        self.prompts = PromptCache(model)
        self.sessions: dict[str, Session] = {}
        self.sinks: dict[str, ChunkSink] = {}
        self._commands: queue.Queue[tuple[Callable[[], Any], cf.Future]] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._running = False
        self._ready = False
        self.calibration: dict[tuple[str, int], float] = dict(calibration or {})
        self._degrade_level = 0

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._thread is not None:
            return
        self._loop = asyncio.get_running_loop()
        # Every torch call from here on runs on the model thread, calibration included; the
        # caller's OpenMP workers would otherwise slow each of its calls (streamer/openmp.py).
        release_caller_pool()
        self._running = True
        self._thread = threading.Thread(target=self._run, name="streamer-engine", daemon=True)
        self._thread.start()
        try:
            await self._call(self._calibrate)
        except BaseException:
            await self.stop()
            raise
        self._ready = True

    def ready(self) -> bool:
        return self._ready and self._running

    async def stop(self) -> None:
        if not self._running:
            return
        await self._call(self._end_all)
        self._running = False
        self._ready = False
        self._commands.put((lambda: None, cf.Future()))  # wake the thread so it sees the flag
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, 10.0)

    # -- the EngineAPI surface (called on the event loop) -----------------------------------------
    async def open_session(self, params: StartMessage, sink: ChunkSink) -> SessionHandle:
        return await self._call(lambda: self._open(params, sink))

    async def control(self, session_id: str, msg: ControlMessage) -> dict:
        return await self._call(lambda: self._control(session_id, msg))

    async def close_session(self, session_id: str, reason: str) -> None:
        await self._call(lambda: self._end(session_id, reason, notify=False))

    def info(self) -> dict:
        return {
            "model": self.spec.to_json(),
            "device": str(self.model.device),
            "compute_dtype": str(self.model.compute_dtype).removeprefix("torch."),
            "fps": self.fps,
            "steps": self.steps,
            "scheduler": self.cfg.scheduler,
            "capacity": {
                "max_sessions": self.cfg.max_sessions,
                "utilisation": round(self.scheduler.utilisation(), 4),
                "utilisation_bound": self.cfg.utilisation_bound,
                "cache_slots_free": self.pool.free_slots,
                "cache_bytes_per_slot": self.pool.bytes_per_slot,
            },
            "caching": {"step_reuse": self.cfg.step_reuse, "commit_reuse": self.cfg.commit_reuse,
                        **self.model.caching_stats()},
            "sessions": len(self.sessions),
        }

    async def _call(self, fn: Callable[[], Any]) -> Any:
        if not self._running:
            raise RuntimeError("engine is not running")
        fut: cf.Future = cf.Future()
        self._commands.put((fn, fut))
        return await asyncio.wrap_future(fut)

    # -- commands (model thread) -----------------------------------------------------------------
    def _open(self, params: StartMessage, sink: ChunkSink) -> SessionHandle:
        sid = str(uuid.uuid4())
        steps = params.steps or self.steps
        self._refresh_fps()
        spec = SessionSpec(sid, self.fps, self.spec.frames_per_chunk, steps, self.spec.step_floor(steps))
        adm: Admission = self.scheduler.add_session(spec, self.clock())
        if not adm.admitted:
            raise Refused(adm.reason, adm.queue_position)
        try:
            prompt = self.prompts.get(params.prompt or self.cfg.default_prompt)
            slot = self.pool.allocate()
        except Exception:
            self.scheduler.remove_session(sid, self.clock())
            raise
        seed = params.seed if params.seed is not None else secrets.randbits(32)
        self.sessions[sid] = Session(sid, secrets.token_urlsafe(16), slot, self.spec, prompt, seed, steps,
                                     self.cfg.blend_chunks)
        self.sinks[sid] = sink
        metrics.SESSIONS_ACTIVE.set(len(self.sessions))
        if prompt.unknown_words:
            self._emit(sid, {"type": "prompt", "unknown_words": prompt.unknown_words, "applies_from_chunk": 0})
        s = self.sessions[sid]
        return SessionHandle(sid, s.token, self.fps, self.spec.frames_per_chunk, self.spec.width, self.spec.height)

    def _control(self, session_id: str, msg: ControlMessage) -> dict:
        session = self.sessions.get(session_id)
        if session is None:
            raise KeyError(session_id)
        return apply_control(session, msg, self.prompts, self.scheduler, self.clock())

    def _end(self, session_id: str, reason: str, notify: bool = True) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        session.transition(SessionState.ENDED)
        self.scheduler.remove_session(session_id, self.clock())
        self.pool.release(session.slot)
        sink = self.sinks.pop(session_id)
        metrics.SESSIONS_ACTIVE.set(len(self.sessions))
        self._note_degrade()  # the last session leaving resets the level
        if notify and self._loop is not None:
            self._loop.call_soon_threadsafe(sink.on_event, {"type": "ended", "reason": reason})

    def _end_all(self) -> None:
        for sid in list(self.sessions):
            self._end(sid, "shutdown")

    def _emit(self, session_id: str, event: dict) -> None:
        sink = self.sinks.get(session_id)
        if sink is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(sink.on_event, event)

    # -- the model thread ------------------------------------------------------------------------
    def _calibrate(self) -> None:
        if self.cfg.calibrate and not self.calibration:
            self.calibration = calibrate(self.model, self.pool, self.steps)
        if self.calibration:
            self.scheduler.cost.calibrate(self.calibration)
            self._refresh_fps()

    def _refresh_fps(self) -> None:
        """Without a fixed `fps`: serve the highest rate at which `fps_sessions` sessions fit, by
        the cost model as learned so far. The model keeps learning after start-up, so a slow or
        fast spell of the calibration run must not set the rate for the server's whole life; it
        is re-derived after every batch (so `info()` reports what a session opened now gets) and
        at every open (the cost model may also have learned outside a batch)."""
        if self.cfg.fps is None and self.calibration:
            self.fps = self.scheduler.sustainable_fps(self.cfg.fps_sessions, self.steps,
                                                      self.spec.frames_per_chunk, self.spec.fps)

    def _note_degrade(self) -> None:
        """Log and export each change of the overload policy's level: an operator's first clue
        when sessions get a lower rate than they were admitted at."""
        level, cut, factor = self.scheduler.degrade_state()
        if level != self._degrade_level:
            log.info("overload policy: level %d -> %d (%d denoising steps fewer, chunk period x%.2f)",
                     self._degrade_level, level, cut, factor)
            self._degrade_level = level
            metrics.DEGRADE_LEVEL.set(level)

    def _drain_commands(self, timeout: float | None) -> None:
        """Run every queued command; wait up to `timeout` for the first (0: do not wait).

        A timeout of 0 must still drain: it is the call between model steps, and under sustained
        load it is the only one, so skipping it would starve controls, closes and new sessions.
        """
        item: tuple[Callable[[], Any], cf.Future] | None
        try:
            if timeout is None or timeout > 0:
                item = self._commands.get(timeout=timeout)
            else:
                item = self._commands.get_nowait()
        except queue.Empty:
            return
        while item is not None:
            fn, fut = item
            if fut.set_running_or_notify_cancel():
                try:
                    fut.set_result(fn())
                except BaseException as exc:  # handed to the awaiting coroutine
                    fut.set_exception(exc)
            try:
                item = self._commands.get_nowait()
            except queue.Empty:
                item = None

    def _run(self) -> None:
        torch.set_grad_enabled(False)
        while self._running:
            self._drain_commands(0)
            now = self.clock()
            planning = time.perf_counter()
            plan = self.scheduler.schedule(now)
            metrics.SCHEDULER_SECONDS.labels("schedule").observe(time.perf_counter() - planning)
            if plan is None:
                nxt = self.scheduler.next_release(now)
                self._drain_commands(0.05 if nxt is None else min(max(nxt - now, 0.0), 0.05))
                continue
            self._run_plan(plan)

    def _run_plan(self, plan: StepPlan) -> None:
        from .batch_runner import run_batch

        started = self.clock()
        failed: tuple[str, ...] = ()
        finished: list[tuple[Session, Any]] = []
        try:
            finished = run_batch(self, plan)
        except Exception:
            log.exception("batch of %d %s items failed", len(plan.items), plan.kind)
            # Isolate the culprit: rerun each item alone, so one bad session cannot take down
            # the others it happened to be batched with. Sessions only change state after the
            # model call returns, so a rerun starts from the same state.
            for item in plan.items:
                try:
                    finished += run_batch(self, StepPlan((item,), plan.kind, plan.predicted_s, plan.planned_at))
                except Exception as exc:
                    failed += (item.session_id,)
                    self._emit(item.session_id, {"type": "error", "code": "model_error",
                                                 "message": f"model step failed: {exc}"})
        # A model call may return before its device work is done (commit hands nothing back to
        # wait for): unwaited, the cost model would learn launch costs per batch kind and bill
        # the rest to whichever batch came next.
        synchronize(self.model.device)
        elapsed = self.clock() - started
        booking = time.perf_counter()
        done = self.scheduler.update(plan, StepResult(elapsed, failed), self.clock())
        self._refresh_fps()
        self._note_degrade()
        metrics.SCHEDULER_SECONDS.labels("update").observe(time.perf_counter() - booking)
        for sid in failed:
            self._end(sid, "error")
        metrics.BATCH_SIZE.labels(plan.kind).observe(len(plan.items))
        metrics.STEP_SECONDS.labels(plan.kind).observe(elapsed)
        by_id = {d.session_id: d for d in done}
        for session, frames in finished:
            d = by_id.get(session.id)
            if d is not None:
                metrics.CHUNKS.inc()
                metrics.DEADLINE_MISSES.inc(int(d.missed))
                metrics.QUEUE_DELAY.observe(d.queue_delay_s)
                metrics.CHUNK_LATENCY.observe(d.queue_delay_s + d.compute_s)
                if not d.epoch:  # an epoch chunk is due at arrival: its "slack" is minus the TTFF
                    metrics.CHUNK_SLACK.observe(d.deadline - d.finished_at)
            self._deliver(session, frames)

    def _deliver(self, session: Session, frames: Any) -> None:
        work = session.history[-1]
        f = self.spec.frames_per_chunk
        chunk = Chunk(
            session_id=session.id, chunk_index=work.index, first_frame=work.index * f, frames=frames,
            capture_ts=time.time(), fps=self.scheduler.effective_fps(session.id),
            prompt_version=work.prompt_version,
        )
        sink = self.sinks.get(session.id)
        if sink is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(sink.on_chunk, chunk)

    # -- helpers used by batch_runner --------------------------------------------------------------
    def conditioning(self, prompts: list[PromptCond], actions: list[torch.Tensor],
                     controls: list[torch.Tensor]) -> Conditioning:
        return Conditioning(prompts=prompts, actions=torch.stack(actions), controls=torch.stack(controls))
