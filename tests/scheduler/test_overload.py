"""Overload: reality slower than calibrated; every session is degraded alike, and recovers."""

from __future__ import annotations

from collections.abc import Callable

from scheduler import CostModel, SchedulerConfig, SessionSpec, StepScheduler, simulate

from .helpers import FIXED_S, PER_SAMPLE_S, calibrated, spec

TWICE = 2.0


def scaled(factor: list[float]) -> Callable[[str, int], float]:
    """A batch cost whose scale an event can change: factor[0] times the calibrated cost."""
    return lambda kind, b: factor[0] * (FIXED_S + PER_SAMPLE_S * b)


def four_sessions(min_steps: int = 1) -> list[tuple[float, SessionSpec]]:
    return [(0.0, spec(f"s{i}", min_steps=min_steps)) for i in range(4)]


def test_twice_the_calibrated_cost_lowers_every_sessions_steps_alike() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())
    report = simulate(sched, four_sessions(), 20.0, scaled([TWICE]), jitter=0.1)
    sessions = report.stats["sessions"]
    steps = {s["steps"] for s in sessions.values()}
    assert len(steps) == 1 and steps.pop() < 4  # all lowered, all equal
    assert report.stats["degrade_factor"] == 1.0  # fewer steps were enough
    assert report.misses_after(5.0) == 0
    assert min(report.per_session_fps.values()) > 11.5  # nobody was stalled to save the others


def test_when_steps_cannot_drop_every_sessions_fps_is_stretched_alike() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())
    report = simulate(sched, four_sessions(min_steps=4), 20.0, scaled([TWICE]), jitter=0.1)
    sessions = report.stats["sessions"]
    assert report.stats["step_cut"] == 0 and report.stats["degrade_factor"] > 1.5
    effective = {s["effective_fps"] for s in sessions.values()}
    assert len(effective) == 1 and effective.pop() < 8.0
    assert {s["steps"] for s in sessions.values()} == {4}
    assert report.misses_after(5.0) == 0
    fps = report.per_session_fps.values()
    assert max(fps) - min(fps) < 0.05 * max(fps)


def test_recovers_when_the_load_drops() -> None:
    factor = [TWICE]
    sched = StepScheduler(SchedulerConfig(), calibrated())
    levels: list[int] = []

    def back_to_normal(s: object, t: float) -> None:
        levels.append(sched.degrade_level)
        factor[0] = 1.0

    report = simulate(
        sched, four_sessions(), 45.0, scaled(factor), jitter=0.1, events=[(15.0, back_to_normal)]
    )
    assert levels[0] > 0
    assert report.stats["degrade_level"] == 0
    assert {s["steps"] for s in report.stats["sessions"].values()} == {4}
    assert report.misses_after(15.0) == 0


def test_degrading_can_be_switched_off() -> None:
    sched = StepScheduler(SchedulerConfig(degrade=False), calibrated())
    report = simulate(sched, four_sessions(), 5.0, scaled([TWICE]))
    assert report.stats["degrade_level"] == 0 and report.misses > 0


class FrozenCostModel(CostModel):
    """A model that never learns: predicted utilisation stays low however slow reality is."""

    def observe(self, kind: str, batch_size: int, seconds: float) -> None:
        return None


def test_measured_misses_alone_trigger_degradation() -> None:
    frozen = FrozenCostModel()
    frozen.calibrate(calibrated().measurements())
    sched = StepScheduler(SchedulerConfig(), frozen)
    report = simulate(sched, four_sessions(), 30.0, scaled([1.5]), jitter=0.1)
    assert sched.utilisation() < 0.85  # the model still thinks all is well
    assert report.stats["degrade_level"] > 0
    # Each time it tries the lighter level again and misses, it waits twice as long to retry.
    late = [c for c in report.chunks if c.finished_at > 10.0]
    assert report.misses_after(10.0) <= 0.03 * len(late)
    assert report.misses_after(10.0) < report.misses - report.misses_after(10.0)


def test_the_last_session_leaving_resets_the_degrade_level() -> None:
    sched = StepScheduler(SchedulerConfig(), calibrated())
    simulate(sched, four_sessions(), 5.0, scaled([TWICE]))
    assert sched.degrade_level > 0
    for sid in list(sched.session_ids):
        sched.remove_session(sid, 5.0)
    assert sched.degrade_level == 0
    assert sched.add_session(spec("fresh"), 5.0).admitted


def test_a_cold_first_step_does_not_degrade_a_session_that_fits() -> None:
    """A session's first step runs cold, several times slower than the rest, and the cost model
    follows each batch. Without the hold, that one batch was overload: the first user of an idle
    server was stretched at its second step (for good, while recovery also asked for the bound)."""

    def cold_first(config: SchedulerConfig) -> tuple[list[int], float]:
        sched = StepScheduler(config, calibrated())
        calls = [0]

        def cost(kind: str, b: int) -> float:  # 10 % above the calibration, the first batch 6x
            calls[0] += 1
            return (6.0 if calls[0] == 1 else 1.1) * (FIXED_S + PER_SAMPLE_S * b)

        levels: list[int] = []
        every_half_second = [(t / 2, lambda s, t: levels.append(sched.degrade_level)) for t in range(1, 40)]
        report = simulate(sched, [(0.0, spec("a", fps=23.0, min_steps=4))], 20.0, cost,  # as served
                          events=every_half_second)  # fmt: skip
        assert 0.85 < sched.utilisation() < 1.0  # steady: between the bound and the threshold
        return levels, report.per_session_fps["a"]

    levels, fps = cold_first(SchedulerConfig())
    assert max(levels) == 0 and fps > 22.5
    levels, fps = cold_first(SchedulerConfig(overload_hold_s=0.0))
    assert levels[0] > 0 and fps < 20.0  # what one slow batch did without the hold


def test_a_passing_overload_does_not_keep_a_session_in_the_band_degraded() -> None:
    """A spell of twice the cost degrades a session whose steady load lies between the bound and
    the threshold; once it passes, the session gets its admitted rate back."""
    factor = [1.1]
    sched = StepScheduler(SchedulerConfig(), calibrated())
    levels: list[int] = []

    def spell(s: object, t: float) -> None:
        factor[0] = 2.0

    def over(s: object, t: float) -> None:
        levels.append(sched.degrade_level)
        factor[0] = 1.1

    report = simulate(sched, [(0.0, spec("a", fps=23.0, min_steps=4))], 40.0, scaled(factor),
                      events=[(5.0, spell), (8.0, over)])  # fmt: skip
    assert levels[0] > 0
    assert 0.85 < sched.utilisation() < 1.0 and sched.degrade_level == 0
    late = [c for c in report.chunks if c.finished_at > 30.0]
    assert late and report.misses_after(30.0) == 0
