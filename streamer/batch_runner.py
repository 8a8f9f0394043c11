"""One planned batch through the model: gather from sessions, run, scatter back.

Kept apart from the engine's threading so the maths of a step (which timestep, which
conditioning snapshot, which cache slot) reads in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from scheduler import StepPlan

from .chunk_steps import denoise_step, finish_chunk

if TYPE_CHECKING:
    from .engine import Engine
    from .session import ChunkWork, Session


def run_batch(engine: Engine, plan: StepPlan) -> list[tuple[Session, np.ndarray]]:
    """Run `plan`; return (session, frames (F, H, W, 3) uint8) for every chunk it finished."""
    sessions = [engine.sessions[item.session_id] for item in plan.items]
    if plan.kind == "denoise":
        _denoise(engine, plan, sessions)
        return []
    return _commit(engine, sessions)


def _cond(engine: Engine, works: list[ChunkWork]):
    return engine.conditioning([w.prompt for w in works], [w.actions for w in works], [w.controls for w in works])


def _denoise(engine: Engine, plan: StepPlan, sessions: list[Session]) -> None:
    works: list[ChunkWork] = []
    for item, s in zip(plan.items, sessions, strict=True):
        if s.work is None:
            if item.step_index != 0:
                raise RuntimeError(f"session {s.id}: step {item.step_index} planned before the chunk started")
            if s.needs_recache:
                recache(engine, s)
            s.begin_chunk(item.steps)
        assert s.work is not None
        works.append(s.work)
    idx = [item.step_index for item in plan.items]
    x_next = denoise_step(
        engine.model, engine.pool, [s.slot for s in sessions], torch.stack([w.x for w in works]),
        [w.timesteps for w in works], idx, _cond(engine, works), engine.cfg.sampler,
        lambda: torch.stack([s.fresh_noise() for s in sessions]),  # each session's own generator
    )
    for w, i, xn in zip(works, idx, x_next, strict=True):
        w.x = xn
        if i + 1 == w.steps:
            w.x0 = xn  # t_next = 0: the sampler returned the clean estimate


def _commit(engine: Engine, sessions: list[Session]) -> list[tuple[Session, np.ndarray]]:
    works: list[ChunkWork] = []
    for s in sessions:
        if s.work is None or s.work.x0 is None:
            raise RuntimeError(f"session {s.id}: commit planned before its chunk was denoised")
        works.append(s.work)
    x0 = torch.stack([w.x0 for w in works if w.x0 is not None])
    frames = finish_chunk(engine.model, engine.pool, [s.slot for s in sessions], x0, _cond(engine, works),
                          _stacked([w.commit_noise for w in works]))
    for s in sessions:
        s.finish_chunk()
    return [(s, frames[i]) for i, s in enumerate(sessions)]


def recache(engine: Engine, session: Session) -> None:
    """LongLive-style redirect: rebuild the session's cache from its kept latents under the new prompt."""
    engine.pool.reset(session.slot)
    for w in session.history:
        assert w.x0 is not None  # history holds finished chunks only
        cond = engine.conditioning([session.prompt], [w.actions], [w.controls])
        engine.model.commit(w.x0[None], cond, engine.pool.batch([session.slot], commit=True),
                            _stacked([w.commit_noise]))
    session.needs_recache = False


def _stacked(noises: list[torch.Tensor | None]) -> torch.Tensor | None:
    """The chunks' commit noises as one batch, or None for a model that commits clean."""
    if any(n is None for n in noises):
        return None
    return torch.stack([n for n in noises if n is not None])
