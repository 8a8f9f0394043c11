"""scheduler: the pure-Python, deadline-aware step scheduler (no torch, nothing from streamer/).

It batches the denoising steps of many video sessions onto one model: `StepScheduler` plans each
model call (earliest deadline first, same-kind batching sized by a learned `CostModel`), admits
sessions only while the predicted utilisation fits, and degrades every session alike under
overload. `SerialScheduler` is the one-stream-at-a-time baseline; `simulate` drives either on a
virtual clock. See docs/scheduler.md.
"""

from scheduler.base import SchedulerBase
from scheduler.baseline import SerialScheduler
from scheduler.config import SchedulerConfig
from scheduler.cost_model import CostModel
from scheduler.simulate import SimReport, simulate
from scheduler.step_scheduler import StepScheduler
from scheduler.types import (
    COMMIT,
    DENOISE,
    Admission,
    ChunkDone,
    Kind,
    PlanItem,
    SessionSpec,
    StepPlan,
    StepResult,
)

__all__ = [
    "COMMIT",
    "DENOISE",
    "Admission",
    "ChunkDone",
    "CostModel",
    "Kind",
    "PlanItem",
    "SchedulerBase",
    "SchedulerConfig",
    "SerialScheduler",
    "SessionSpec",
    "SimReport",
    "StepPlan",
    "StepResult",
    "StepScheduler",
    "simulate",
]
