"""One planned batch through the model: gather from sessions, run, scatter back.

Kept apart from the engine's threading so the maths of a step (which timestep, which
conditioning snapshot, which cache slot) reads in one place.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from scheduler import StepPlan

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
    t = torch.tensor([w.timesteps[i] for w, i in zip(works, idx, strict=True)])
    t_next = torch.tensor([w.timesteps[i + 1] if i + 1 < w.steps else 0.0 for w, i in zip(works, idx, strict=True)])
    x = torch.stack([w.x for w in works])  # (B, F, C, h, w)
    cache = engine.pool.batch([s.slot for s in sessions])
    x0 = engine.model.denoise(x, t, _cond(engine, works), cache)
    x_next = engine.step_latents(x, x0, t, t_next, sessions)
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
    # Decode before commit: commit is the call that changes state (it appends the chunk to each
    # slot's history), so it must come last. A failed batch is re-run item by item, and a decode
    # failing after the commit would append every session's chunk to its cache twice.
    frames = engine.model.decode(x0).numpy()  # (B, F, H, W, 3)
    engine.model.commit(x0, _cond(engine, works), engine.pool.batch([s.slot for s in sessions], commit=True))
    for s in sessions:
        s.finish_chunk()
    return [(s, frames[i]) for i, s in enumerate(sessions)]


def recache(engine: Engine, session: Session) -> None:
    """LongLive-style redirect: rebuild the session's cache from its kept latents under the new prompt."""
    engine.pool.reset(session.slot)
    for w in session.history:
        assert w.x0 is not None  # history holds finished chunks only
        cond = engine.conditioning([session.prompt], [w.actions], [w.controls])
        engine.model.commit(w.x0[None], cond, engine.pool.batch([session.slot], commit=True))
    session.needs_recache = False
