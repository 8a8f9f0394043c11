"""Shared helpers for the scheduler tests: synthetic batch costs, calibrated models, specs."""

from __future__ import annotations

from collections.abc import Callable

from scheduler import CostModel, SchedulerBase, SessionSpec, StepPlan, StepResult, StepScheduler

# The sublinear cost of the benchmarks: 10 ms fixed + 4 ms per sample, per step (or commit).
FIXED_S = 0.010
PER_SAMPLE_S = 0.004


def affine_cost(
    a: float = FIXED_S, c: float = PER_SAMPLE_S, scale: float = 1.0
) -> Callable[[str, int], float]:
    return lambda kind, b: scale * (a + c * b)


def calibrated(
    a: float = FIXED_S, c: float = PER_SAMPLE_S, sizes: tuple[int, ...] = (1, 2, 4, 8)
) -> CostModel:
    """A cost model seeded as an engine would, from a calibration run of a few batch sizes."""
    model = CostModel()
    model.calibrate({(kind, b): a + c * b for kind in ("denoise", "commit") for b in sizes})
    return model


def spec(sid: str, fps: float = 12.0, frames: int = 2, steps: int = 4, min_steps: int = 1) -> SessionSpec:
    return SessionSpec(sid, fps, frames, steps, min_steps)


class RecordingStepScheduler(StepScheduler):
    """A StepScheduler that keeps every plan it made, for assertions about plans."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.plans: list[StepPlan] = []

    def schedule(self, now: float) -> StepPlan | None:
        plan = super().schedule(now)
        if plan is not None:
            self.plans.append(plan)
        return plan


def run_plan(sched: SchedulerBase, now: float, elapsed: float = 0.01) -> tuple[StepPlan, float]:
    """Plan at `now`, pretend it took `elapsed`, apply it; returns the plan and the new time."""
    plan = sched.schedule(now)
    assert plan is not None
    sched.update(plan, StepResult(elapsed), now + elapsed)
    return plan, now + elapsed


def tick(sched: SchedulerBase, now: float, elapsed: float = 0.01) -> tuple[StepPlan | None, float]:
    """One turn of an engine loop: run a plan, or idle until the next release."""
    plan = sched.schedule(now)
    if plan is None:
        release = sched.next_release(now)
        assert release is not None
        return None, release
    sched.update(plan, StepResult(elapsed), now + elapsed)
    return plan, now + elapsed
