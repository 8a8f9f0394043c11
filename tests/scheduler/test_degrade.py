"""DegradeController on its own: triggers, jumps, limits, recovery with hysteresis and backoff."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler import ChunkDone, SchedulerConfig
from scheduler.degrade import DegradeController, LoadFn

# No hold: a load above the threshold is overload at once, so most tests judge in one call.
CONFIG = SchedulerConfig(degrade_cooldown_s=1.0, recover_after_s=5.0, window_s=2.0, max_stretch_levels=2,
                         overload_hold_s=0.0)
HELD = SchedulerConfig(degrade_cooldown_s=1.0, recover_after_s=5.0, window_s=2.0, max_stretch_levels=2,
                       overload_hold_s=1.0)


def table(values: Mapping[tuple[int, int], float], default: float = 0.5) -> LoadFn:
    return lambda cut, stretch: values.get((cut, stretch), default)


def chunks(at: float, total: int, missed: int) -> list[ChunkDone]:
    return [ChunkDone("s", i, at, at, i < missed, 0.0, 0.0) for i in range(total)]


def test_high_utilisation_jumps_to_the_first_level_that_fits() -> None:
    ctl = DegradeController(CONFIG)
    load = table({(0, 0): 1.5, (1, 0): 1.2, (2, 0): 0.8})
    assert ctl.evaluate(10.0, [], load, max_cut=3)
    assert (ctl.step_cut, ctl.stretch_level, ctl.level, ctl.factor) == (2, 0, 2, 1.0)


def test_a_load_above_the_threshold_is_overload_only_once_it_has_held() -> None:
    ctl = DegradeController(HELD)
    heavy = table({(0, 0): 1.5, (1, 0): 0.8})
    assert not ctl.evaluate(10.0, [], heavy, max_cut=3)  # one slow batch, e.g. a session's first
    assert not ctl.evaluate(10.6, [], heavy, max_cut=3)
    assert ctl.evaluate(11.0, [], heavy, max_cut=3)
    assert ctl.level == 1


def test_a_spike_that_ends_restarts_the_hold() -> None:
    ctl = DegradeController(HELD)
    heavy, fine = table({(0, 0): 1.5, (1, 0): 0.8}), table({(0, 0): 0.95})  # fine: above the bound
    assert not ctl.evaluate(10.0, [], heavy, max_cut=3)
    assert not ctl.evaluate(10.5, [], fine, max_cut=3)
    assert not ctl.evaluate(10.8, [], heavy, max_cut=3)
    assert not ctl.evaluate(11.5, [], heavy, max_cut=3)  # held 0.7 s since it came back
    assert ctl.evaluate(11.8, [], heavy, max_cut=3)


def test_misses_do_not_wait_for_the_hold() -> None:
    ctl = DegradeController(HELD)
    assert ctl.evaluate(10.0, chunks(10.0, 10, 2), table({}), max_cut=3)
    assert ctl.level == 1


def test_stretches_once_steps_are_exhausted_and_stops_at_the_limit() -> None:
    ctl = DegradeController(CONFIG)
    always = table({}, default=2.0)
    assert ctl.evaluate(10.0, [], always, max_cut=1)
    assert (ctl.step_cut, ctl.stretch_level) == (1, 2)
    assert ctl.factor == CONFIG.stretch_step**2
    assert not ctl.evaluate(20.0, [], always, max_cut=1)  # nothing left to lower


def test_cooldown_after_a_change() -> None:
    ctl = DegradeController(CONFIG)
    load = table({(0, 0): 1.5})
    assert ctl.evaluate(10.0, [], load, max_cut=3)
    assert not ctl.evaluate(10.5, chunks(10.5, 10, 10), table({}, default=2.0), max_cut=3)
    assert ctl.level == 1


def test_misses_trigger_one_level_but_a_lone_miss_does_not() -> None:
    ctl = DegradeController(CONFIG)
    calm = table({})
    assert not ctl.evaluate(10.0, chunks(10.0, 10, 1), calm, max_cut=3)
    assert ctl.evaluate(10.1, chunks(10.1, 10, 2), calm, max_cut=3)
    assert ctl.level == 1


def test_misses_during_a_grace_period_are_not_overload() -> None:
    ctl = DegradeController(CONFIG)
    ctl.grace(10.0, 0.5)
    ctl.grace(10.1, 0.5)  # graces add up
    assert not ctl.evaluate(10.9, chunks(10.9, 10, 10), table({}), max_cut=3)
    assert ctl.evaluate(11.2, chunks(11.2, 10, 10), table({}), max_cut=3)
    ctl.reset()
    ctl.grace(20.0, 100.0)  # capped at window_s ahead
    assert ctl.evaluate(22.5, chunks(22.5, 10, 10), table({}), max_cut=3)


def test_old_chunks_leave_the_window() -> None:
    ctl = DegradeController(CONFIG)
    assert not ctl.evaluate(10.0, chunks(10.0, 10, 1), table({}), max_cut=3)
    assert not ctl.evaluate(13.0, chunks(13.0, 10, 1), table({}), max_cut=3)  # the first miss expired


def test_recovery_waits_for_calm_and_undoes_stretch_first() -> None:
    ctl = DegradeController(CONFIG)
    assert ctl.evaluate(0.0, [], table({}, default=2.0), max_cut=1)
    assert (ctl.step_cut, ctl.stretch_level) == (1, 2)
    one_up = table({(1, 2): 0.5, (1, 1): 0.9}, default=1.1)  # one stretch level fits, no more
    assert not ctl.evaluate(2.0, [], one_up, max_cut=1)  # calm starts
    assert not ctl.evaluate(6.0, [], one_up, max_cut=1)
    assert ctl.evaluate(7.0, [], one_up, max_cut=1)
    assert (ctl.step_cut, ctl.stretch_level) == (1, 1)


def test_recovery_goes_up_every_level_that_stays_clear_of_overload_at_once() -> None:
    ctl = DegradeController(CONFIG)
    assert ctl.evaluate(0.0, [], table({}, default=2.0), max_cut=1)
    assert (ctl.step_cut, ctl.stretch_level) == (1, 2)
    passed = table({(0, 0): 1.2}, default=0.6)  # the spell is over; steps cut stay needed
    assert not ctl.evaluate(2.0, [], passed, max_cut=1)
    assert ctl.evaluate(7.0, [], passed, max_cut=1)
    assert (ctl.step_cut, ctl.stretch_level) == (1, 0)
    assert not ctl.evaluate(20.0, [], passed, max_cut=1)  # held: and no further


def test_no_recovery_when_the_lighter_level_would_overload_or_chunks_miss() -> None:
    ctl = DegradeController(CONFIG)
    assert ctl.evaluate(0.0, [], table({(0, 0): 1.2, (1, 0): 0.7}), max_cut=3)
    tight = table({(0, 0): 1.05, (1, 0): 0.7})  # level 0 would be overload again
    for t in range(2, 20):
        assert not ctl.evaluate(float(t), [], tight, max_cut=3)
    fits = table({(0, 0): 0.8, (1, 0): 0.7})
    assert not ctl.evaluate(20.0, [], fits, max_cut=3)  # calm starts
    assert not ctl.evaluate(23.0, chunks(23.0, 10, 1), fits, max_cut=3)  # a miss resets the calm
    assert not ctl.evaluate(26.0, [], fits, max_cut=3)
    assert ctl.level == 1


def test_recovery_goes_back_to_a_level_in_the_band_between_the_bound_and_the_threshold() -> None:
    # The admitted rates can sit in that band once streaming costs more than the calibration
    # said: a degrade for a passing reason must not keep them lower for good.
    ctl = DegradeController(CONFIG)
    assert ctl.evaluate(0.0, [], table({(0, 0): 1.2, (1, 0): 0.7}), max_cut=3)
    band = table({(0, 0): 0.93, (1, 0): 0.7})
    assert not ctl.evaluate(1.0, [], band, max_cut=3)  # calm starts
    assert ctl.evaluate(6.0, [], band, max_cut=3) and ctl.level == 0


def test_failed_recoveries_back_off_and_successful_ones_relax() -> None:
    ctl = DegradeController(CONFIG)
    heavy = table({(0, 0): 1.2, (1, 0): 0.7})
    fits = table({(0, 0): 0.8, (1, 0): 0.7})
    assert ctl.evaluate(0.0, [], heavy, max_cut=3)
    assert not ctl.evaluate(1.0, [], fits, max_cut=3)
    assert ctl.evaluate(6.0, [], fits, max_cut=3) and ctl.level == 0  # recovered after 5 s calm
    assert ctl.evaluate(7.5, chunks(7.5, 10, 5), fits, max_cut=3)  # ... but level 0 misses
    assert not ctl.evaluate(9.0, [], fits, max_cut=3)
    assert not ctl.evaluate(14.5, [], fits, max_cut=3)  # 5 s is no longer enough
    assert ctl.evaluate(19.0, [], fits, max_cut=3) and ctl.level == 0  # 10 s is
    assert not ctl.evaluate(30.0, [], fits, max_cut=3)  # this time it held: the wait relaxes


def test_a_shrinking_session_set_clamps_the_step_cut() -> None:
    ctl = DegradeController(CONFIG)
    assert ctl.evaluate(0.0, [], table({}, default=2.0), max_cut=3)
    assert not ctl.evaluate(0.5, [], table({}), max_cut=1)
    assert ctl.step_cut == 1
