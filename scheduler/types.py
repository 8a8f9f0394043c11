"""Plain messages between the scheduler and its callers (the engine, the simulator, tests).

Every message is a frozen dataclass of ids, ints and floats, so the scheduler can be driven on
a virtual clock with fake results and never needs torch.

Vocabulary:
- a *session* streams video at `fps`; its video is cut into *chunks* of `frames_per_chunk` frames;
- a chunk takes `steps` "denoise" items (`step_index` 0..steps-1) and then one "commit" item
  (writes the finished chunk into the session's KV cache); after the commit the chunk is done;
- a *plan* is one model call: items of one kind, one per session, each at its own step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Kind = Literal["denoise", "commit"]
DENOISE: Final = "denoise"
COMMIT: Final = "commit"
KINDS: Final[tuple[Kind, Kind]] = (DENOISE, COMMIT)


def check_kind(kind: str) -> Kind:
    """Return `kind` typed as a Kind, or raise ValueError naming it."""
    if kind == DENOISE:
        return DENOISE
    if kind == COMMIT:
        return COMMIT
    raise ValueError(f"kind must be 'denoise' or 'commit', got {kind!r}")


@dataclass(frozen=True, slots=True)
class SessionSpec:
    """What a session asks of the scheduler: its frame rate, chunk size and step budget."""

    session_id: str
    fps: float
    frames_per_chunk: int
    steps: int
    min_steps: int = 1  # the overload policy never lowers steps below this

    def __post_init__(self) -> None:
        if not self.session_id:
            raise ValueError("session_id must not be empty")
        if not self.fps > 0:
            raise ValueError(f"fps must be > 0, got {self.fps}")
        if self.frames_per_chunk < 1:
            raise ValueError(f"frames_per_chunk must be >= 1, got {self.frames_per_chunk}")
        if not 1 <= self.min_steps <= self.steps:
            raise ValueError(
                f"need 1 <= min_steps <= steps, got min_steps={self.min_steps} steps={self.steps}"
            )

    @property
    def chunk_period(self) -> float:
        """Seconds of video in one chunk: the rate at which chunks must be delivered."""
        return self.frames_per_chunk / self.fps


@dataclass(frozen=True, slots=True)
class PlanItem:
    """One sample of a batch: session `session_id`, chunk `chunk_index`, at `step_index`.

    `steps` is the step count in force for this chunk (fixed when the chunk starts), so the engine
    picks the timestep schedule for `steps` steps and takes entry `step_index` of it. A commit item
    has `step_index == steps`.
    """

    session_id: str
    chunk_index: int
    kind: Kind
    step_index: int
    steps: int


@dataclass(frozen=True, slots=True)
class StepPlan:
    """One model call: every item has the same kind; it runs to completion once planned."""

    items: tuple[PlanItem, ...]
    kind: Kind
    predicted_s: float
    planned_at: float

    @property
    def batch_size(self) -> int:
        return len(self.items)

    @property
    def session_ids(self) -> tuple[str, ...]:
        return tuple(item.session_id for item in self.items)


@dataclass(frozen=True, slots=True)
class StepResult:
    """What the engine measured for a plan; `failed_sessions` are dropped by the scheduler."""

    elapsed_s: float
    failed_sessions: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ChunkDone:
    """A finished chunk, returned by `update` so the caller can hand it to the client.

    The first chunk after a start or a resume is due "as soon as possible": its `deadline` is the
    arrival (resume) time and it is never counted as `missed`; time to first chunk measures it.
    `epoch` marks such a chunk. `queue_delay_s` is how long the chunk waited after it became ready
    before its first step ran; `compute_s` sums the elapsed seconds of the batches it took part in.
    """

    session_id: str
    chunk_index: int
    finished_at: float
    deadline: float
    missed: bool
    queue_delay_s: float
    compute_s: float
    epoch: bool = False


@dataclass(frozen=True, slots=True)
class Admission:
    """The answer to `add_session`. `queue_position` is 1-based and set only when queued."""

    admitted: bool
    reason: str
    utilisation: float
    queue_position: int | None = None
