"""CostModel: predicted seconds of one model call, per batch kind and batch size, learned online.

The model keeps, per kind, a table of seconds per batch size:
- `calibrate` seeds it from a calibration run (the engine times batches of a few sizes at start);
- `observe` folds each measured batch into the entry of its size (exponential moving average),
  and moves the entries of the *other* sizes with a per-kind *level*: the ratio of measured
  seconds to what the calibration's shape predicts at the measured size, smoothed at rate
  `shared` x `alpha`. The common causes of a wrong figure (another job on the GPU, clocks,
  longer KV caches, a calibration run on a cold or busy process) scale every size; without the
  level, sizes not in use would keep stale figures, and admission control (which predicts at the
  batch size a new session *would* make) would over-admit, or refuse what the device holds.
  The level is measured against the calibration, not against the measured size's own learned
  entry, so it keeps moving until the sizes not in use agree with what is measured: a start-up
  calibration that was 2x off at every size is corrected at every size, not only where batches
  happen to run. An uncalibrated model has no measured shape (the prior is a guess), so there
  the other sizes move by the error against the measured size's own entry, which fades as that
  entry converges.

Sizes that are not in the table are interpolated between the nearest entries; outside the table
an affine fit a + c*b (least squares over the entries, a, c >= 0) extrapolates. Predictions are
monotone non-decreasing in b (a running maximum over the table). An unseen kind borrows the other
kind's table (a commit costs about one denoising step); an empty model uses a prior in which half
of a size-1 call is fixed overhead, so batching looks worth trying until measurements say no.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.types import COMMIT, DENOISE, KINDS, Kind, check_kind

_REL_TOL = 1e-9  # per-sample cost must drop by more than this to count as a drop
_FLOOR_S = 1e-9  # predictions are strictly positive


class CostModel:
    """Seconds per batch, for a kind ("denoise" or "commit") and a batch size."""

    def __init__(
        self,
        default_step_s: float = 0.05,
        alpha: float = 0.3,
        shared: float = 0.5,
        prior_fixed: float = 0.5,
    ) -> None:
        if not default_step_s > 0:
            raise ValueError(f"default_step_s must be > 0, got {default_step_s}")
        if not 0 < alpha <= 1:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if not 0 <= shared <= 1:
            raise ValueError(f"shared must be in [0, 1], got {shared}")
        if not 0 <= prior_fixed < 1:
            raise ValueError(f"prior_fixed must be in [0, 1), got {prior_fixed}")
        self.default_step_s = default_step_s
        self.alpha = alpha
        self.shared = shared
        self.prior_fixed = prior_fixed
        self._table: dict[Kind, dict[int, float]] = {kind: {} for kind in KINDS}
        self._seed: dict[Kind, dict[int, float]] = {kind: {} for kind in KINDS}  # as calibrated
        self._level: dict[Kind, float] = {kind: 1.0 for kind in KINDS}  # measured / seed shape
        self._observed: dict[tuple[Kind, int], int] = {}
        self._memo: dict[tuple[Kind, int], float] = {}

    # ---- learning -------------------------------------------------------------------------

    def calibrate(self, measurements: Mapping[tuple[str, int], float]) -> None:
        """Seed (or overwrite) table entries with measured seconds from a calibration run."""
        for (kind, batch_size), seconds in measurements.items():
            self._check(batch_size, seconds)
            k = check_kind(kind)
            self._table[k][batch_size] = self._seed[k][batch_size] = float(seconds)
            self._level[k] = 1.0
        self._memo.clear()

    def observe(self, kind: str, batch_size: int, seconds: float) -> None:
        """Fold one measured batch into the model."""
        k = check_kind(kind)
        self._check(batch_size, seconds)
        seed = self._pick(self._seed, k)
        if seed:  # what the calibration's shape predicts here, at the level measured so far
            reference = max(self._level[k] * self._raw(seed, batch_size), _FLOOR_S)
        else:  # no calibration: the only shape is the prior's guess, so compare with the entry
            reference = self.predict(k, batch_size)
        pull = 1.0 + self.alpha * self.shared * (seconds / reference - 1.0)
        self._level[k] *= pull
        table = self._table[k]
        old = table.get(batch_size)
        table[batch_size] = seconds if old is None else old + self.alpha * (seconds - old)
        for size in table:
            if size != batch_size:
                table[size] = max(table[size] * pull, _FLOOR_S)
        self._observed[(k, batch_size)] = self._observed.get((k, batch_size), 0) + 1
        self._memo.clear()

    def observations(self, kind: str, batch_size: int) -> int:
        """How many measured batches of this kind and size the model has seen."""
        return self._observed.get((check_kind(kind), batch_size), 0)

    def measurements(self) -> dict[tuple[str, int], float]:
        """The current table, in the shape `calibrate` takes (to persist a calibration)."""
        return {(kind, size): s for kind in KINDS for size, s in sorted(self._table[kind].items())}

    # ---- prediction -----------------------------------------------------------------------

    def predict(self, kind: str, batch_size: int) -> float:
        """Predicted seconds for one call of `batch_size` samples; monotone non-decreasing."""
        k = check_kind(kind)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        key = (k, batch_size)
        cached = self._memo.get(key)
        if cached is None:
            cached = self._memo[key] = max(self._raw(self._pick(self._table, k), batch_size), _FLOOR_S)
        return cached

    def per_sample(self, kind: str, batch_size: int) -> float:
        """Predicted seconds per sample at this batch size."""
        return self.predict(kind, batch_size) / batch_size

    def max_useful_batch(self, kind: str, limit: int) -> int:
        """The smallest batch size in 1..limit with the lowest per-sample cost.

        Adding samples is worth it only while the per-sample cost still drops; on a saturated
        device (cost linear in b) the answer is 1 and extra samples only delay the urgent one.
        """
        best, best_cost = 1, self.per_sample(kind, 1)
        for size in range(2, limit + 1):
            cost = self.per_sample(kind, size)
            if cost < best_cost * (1.0 - _REL_TOL):
                best, best_cost = size, cost
        return best

    # ---- internals ------------------------------------------------------------------------

    @staticmethod
    def _check(batch_size: int, seconds: float) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not seconds > 0:
            raise ValueError(f"seconds must be > 0, got {seconds}")

    @staticmethod
    def _pick(tables: Mapping[Kind, dict[int, float]], kind: Kind) -> dict[int, float]:
        """The kind's table, or the other kind's while this one is empty."""
        table = tables[kind]
        return table if table else tables[COMMIT if kind == DENOISE else DENOISE]

    def _raw(self, table: Mapping[int, float], b: int) -> float:
        if not table:
            return self.default_step_s * (self.prior_fixed + (1.0 - self.prior_fixed) * b)
        sizes = sorted(table)
        below = [table[s] for s in sizes if s <= b]
        if not below:  # smaller than anything seen: extrapolate down, never above the smallest
            return min(self._affine(table, b), table[sizes[0]])
        running_max = max(below)
        if b in table:
            return running_max
        if b > sizes[-1]:
            return max(self._affine(table, b), running_max)
        lo = max(s for s in sizes if s < b)
        hi = min(s for s in sizes if s > b)
        interp = table[lo] + (table[hi] - table[lo]) * (b - lo) / (hi - lo)
        return max(interp, running_max)

    def _affine(self, table: Mapping[int, float], b: int) -> float:
        """a + c*b fitted by least squares with a, c >= 0 (one point: the prior's shape)."""
        points = list(table.items())
        if len(points) == 1:
            (b0, t0), f = points[0], self.prior_fixed
            return t0 * (f + (1.0 - f) * b) / (f + (1.0 - f) * b0)
        n = len(points)
        mean_b = sum(s for s, _ in points) / n
        mean_t = sum(t for _, t in points) / n
        var = sum((s - mean_b) ** 2 for s, _ in points)
        cov = sum((s - mean_b) * (t - mean_t) for s, t in points)
        c = max(cov / var, 0.0)
        a = mean_t - c * mean_b
        if a < 0:  # refit through the origin
            a = 0.0
            c = sum(s * t for s, t in points) / sum(s * s for s, _ in points)
        return a + c * b
