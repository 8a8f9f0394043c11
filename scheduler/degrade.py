"""DegradeController: the overload policy, lowering quality for every session alike.

When reality is slower than admission predicted (the measured utilisation, i.e. the load computed
from the cost model as it has learned the real batch times, stays above `overload_utilisation`
for `overload_hold_s`, or chunks miss their deadlines at more than `miss_rate_threshold` in the
recent window), the controller degrades one *level* at a time, for all sessions at once:

1. `step_cut` += 1: every session runs one denoising step fewer (never below its `min_steps`),
   from its next chunk on (a chunk keeps the step count it started with);
2. once no session can lose a step, `stretch_level` += 1: every session's chunk period is
   stretched by `stretch_step` (its effective fps drops by the same factor).

When the measured load says one level is not enough, it goes down several levels at once, to
the first whose predicted load fits the bound, so it lands with the admission margin. After a
change it waits `degrade_cooldown_s` before judging again (chunks finishing meanwhile were late
from before the change), and misses in a grace period after an admission or resume are not
overload (a first chunk is due at once and displaces the others on purpose). It recovers (stretch
first, then steps) when the load one level up would not be overload and there have been no
misses for a calm period, going up as many levels as stay clear of overload. The calm period
starts at `recover_after_s` and doubles each time a recovery is followed by overload (the cost
model was too optimistic about the lighter level), halving again when one holds: that backoff is
what stops it flapping. The scheduler re-anchors every session's clock at each change (see
`StreamState.rebase`).

Both the hold and the recovery threshold are there because the sessions' own admitted rates can
sit between the bound and the overload threshold: the server serves the rate that its start-up
calibration says fits the bound, and streaming adds work the calibration did not see (encoding,
the transport's loop), so the cost model soon learns batches 5-20 % dearer (the 2-core host,
its client on the same cores). A session's first steps also run cold, several times slower
than later ones, and the cost model, which follows each batch, read one such batch as overload. When one slow batch was overload and recovery
needed the bound, the first user of an idle server was stretched at its second step and kept the
lower rate for good (docs/scheduler.md, "The hold, and recovery to the threshold").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

from scheduler.config import SchedulerConfig
from scheduler.types import ChunkDone

# load(step_cut, stretch_level) -> predicted utilisation of the active sessions at that setting
LoadFn = Callable[[int, int], float]


class DegradeController:
    """Holds the degrade setting and decides, after each plan, whether to change it."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.reset()

    @property
    def level(self) -> int:
        return self.step_cut + self.stretch_level

    @property
    def factor(self) -> float:
        """The chunk-period factor (1 / the fraction of fps delivered)."""
        return float(self.config.stretch_step**self.stretch_level)

    def reset(self) -> None:
        """Back to full quality, with no history (also: no session left to judge by)."""
        self.step_cut = 0
        self.stretch_level = 0
        self._last_change = float("-inf")
        self._calm_since: float | None = None
        self._recent: deque[tuple[float, bool]] = deque()  # (finished_at, missed)
        self._grace_until = float("-inf")
        self._recover_wait = self.config.recover_after_s
        self._probing = False  # the last change was a recovery that has not yet proven itself
        self._over_since: float | None = None  # measured load above the threshold since then

    def grace(self, now: float, seconds: float) -> None:
        """Do not count misses for a while: a session (re)started at `now`, and its first chunk,
        due at once, displaces about one chunk of the others' work on purpose. A burst of
        arrivals displaces more, so graces add up (to at most `window_s` ahead)."""
        self._grace_until = min(max(self._grace_until, now) + seconds, now + self.config.window_s)

    def evaluate(self, now: float, done: Iterable[ChunkDone], load: LoadFn, max_cut: int) -> bool:
        """Record finished chunks and maybe change level; True when the level changed.

        `max_cut` is the largest step cut that still lowers some session's steps.
        """
        cfg = self.config
        self.step_cut = min(self.step_cut, max_cut)  # sessions that left may have allowed more
        if now - self._last_change < cfg.degrade_cooldown_s:
            return False  # chunks late from before the change are still draining: not judged
        self._recent.extend((c.finished_at, c.missed and c.finished_at > self._grace_until) for c in done)
        while self._recent and self._recent[0][0] < now - cfg.window_s:
            self._recent.popleft()
        misses = sum(missed for _, missed in self._recent)
        miss_rate = misses / len(self._recent) if self._recent else 0.0
        if load(self.step_cut, self.stretch_level) <= cfg.overload_utilisation:
            self._over_since = None
        elif self._over_since is None:
            self._over_since = now
        overloaded = (self._over_since is not None and now - self._over_since >= cfg.overload_hold_s) or (
            misses >= cfg.min_window_misses and miss_rate > cfg.miss_rate_threshold
        )
        if overloaded:
            self._calm_since = None
            if self._probing:  # the level just left was too light after all: wait longer next time
                self._recover_wait = min(2 * self._recover_wait, 64 * cfg.recover_after_s)
                self._probing = False
            return self._degrade(now, load, max_cut)
        if self._probing and now - self._last_change >= self._recover_wait:
            self._recover_wait = max(self._recover_wait / 2, cfg.recover_after_s)
            self._probing = False
        if self.level == 0 or misses:
            self._calm_since = None
            return False
        target = self._lightest_level_that_fits(load)
        if target is None:
            self._calm_since = None
            return False
        if self._calm_since is None:
            self._calm_since = now
        if now - self._calm_since < self._recover_wait:
            return False
        self.step_cut, self.stretch_level = target
        self._changed(now)
        self._probing = True
        return True

    def _lightest_level_that_fits(self, load: LoadFn) -> tuple[int, int] | None:
        """The (cut, stretch) fewest levels down whose predicted load is not overload, going up
        from the current one level at a time (stretch first, then steps); None if even one level
        up would be. Going up several levels at once mirrors going down: after a passing spell
        (another process on the cores) one level a calm period took half a minute to undo."""
        best = None
        cut, stretch = self.step_cut, self.stretch_level
        while cut > 0 or stretch > 0:
            cut, stretch = (cut, stretch - 1) if stretch > 0 else (cut - 1, 0)
            if load(cut, stretch) > self.config.overload_utilisation:
                break
            best = (cut, stretch)
        return best

    def _degrade(self, now: float, load: LoadFn, max_cut: int) -> bool:
        moved = False
        while self.step_cut < max_cut or self.stretch_level < self.config.max_stretch_levels:
            if self.step_cut < max_cut:
                self.step_cut += 1
            else:
                self.stretch_level += 1
            moved = True
            if load(self.step_cut, self.stretch_level) <= self.config.utilisation_bound:
                break
        if moved:
            self._changed(now)
        return moved

    def _changed(self, now: float) -> None:
        self._last_change = now
        self._calm_since = None
        self._over_since = None
        self._recent.clear()
