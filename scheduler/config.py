"""SchedulerConfig: the knobs of the step scheduler, its admission control and overload policy.

Times are seconds. `playout_delay` and `lookahead` default to multiples of each session's own
chunk period (sessions may run at different frame rates), so `None` means "use the default
multiple" rather than "off".
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.types import SessionSpec


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Limits, deadline shape, admission and overload settings shared by all schedulers."""

    max_batch: int = 8  # the engine passes min(its own limit, the model's max_batch)
    max_sessions: int = 16
    utilisation_bound: float = 0.85
    queue_when_full: bool = False

    # Deadlines: chunk k >= 1 is due at t0 + k * period + playout_delay (t0 = chunk 0 delivered)
    # and becomes ready `lookahead` seconds before that.
    playout_delay: float | None = None  # None: one chunk period (a one-chunk jitter buffer)
    lookahead: float | None = None  # None: 1.5 chunk periods
    # A session not yet released may start up to `early_start` seconds early, but only to fill a
    # batch up to its most efficient size: this aligns sessions that arrived at different phases.
    early_start: float | None = None  # None: one chunk period

    # Overload policy (StepScheduler only).
    degrade: bool = True
    overload_utilisation: float = 1.0  # measured utilisation above this ...
    overload_hold_s: float = 1.0  # ... for this long is overload (one slow batch is not)
    miss_rate_threshold: float = 0.02  # ... and so is a miss rate above this in the window
    min_window_misses: int = 2  # a lone miss (jitter) is not overload
    window_s: float = 2.0  # recent chunks considered for the miss rate
    degrade_cooldown_s: float = 1.0  # let a level take effect before judging it
    recover_after_s: float = 5.0  # calm this long before undoing one level (doubles after a failed one)
    stretch_step: float = 1.25  # chunk-period factor per fps-stretch level
    max_stretch_levels: int = 8  # 1.25 ** 8 ~ 6x slower at worst

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {self.max_batch}")
        if self.max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {self.max_sessions}")
        if not self.utilisation_bound > 0:
            raise ValueError(f"utilisation_bound must be > 0, got {self.utilisation_bound}")
        if self.playout_delay is not None and self.playout_delay < 0:
            raise ValueError(f"playout_delay must be >= 0, got {self.playout_delay}")
        if self.lookahead is not None and self.lookahead < 0:
            raise ValueError(f"lookahead must be >= 0, got {self.lookahead}")
        if self.early_start is not None and self.early_start < 0:
            raise ValueError(f"early_start must be >= 0, got {self.early_start}")
        if self.overload_hold_s < 0:
            raise ValueError(f"overload_hold_s must be >= 0, got {self.overload_hold_s}")
        if not self.stretch_step > 1:
            raise ValueError(f"stretch_step must be > 1, got {self.stretch_step}")
        if self.max_stretch_levels < 0:
            raise ValueError(f"max_stretch_levels must be >= 0, got {self.max_stretch_levels}")

    def playout_delay_for(self, spec: SessionSpec) -> float:
        return spec.chunk_period if self.playout_delay is None else self.playout_delay

    def early_start_for(self, spec: SessionSpec) -> float:
        return spec.chunk_period if self.early_start is None else self.early_start

    def lookahead_for(self, spec: SessionSpec) -> float:
        return 1.5 * spec.chunk_period if self.lookahead is None else self.lookahead
