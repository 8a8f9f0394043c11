"""Distillation: teach the model to give, in one pass, what two passes of a teacher give.

Two kinds, both started from the teacher's own weights (or a student's, see train.py):
- guidance distillation: one pass gives what classifier-free guidance gives in two;
- step distillation: one sampling step gives what two of the teacher's steps give.

Guidance distillation. Classifier-free guidance runs the model twice per step (under the prompt and under the empty
prompt) and extrapolates, v = vu + s (vc - vu). It is what makes the embedded model follow its
prompt, and it halves the frame rate. Distillation (Meng et al., "On Distillation of Guided
Diffusion Models", 2023) trains a student, started from the teacher's own weights, to predict
the teacher's guided velocity directly; the distilled model then runs unguided at full speed.

The target is computed in the shape of inference: the past as the cache holds it (chunks
committed at the student's `context_noise`, 0: clean) and a current chunk at a sampling time.
Only the last chunk of a clip gets a target, because the unconditional pass at inference swaps
the prompt of the current chunk only: its context stays under the prompt it was committed with.
Making the current chunk the last one keeps the earlier chunks' features identical in both
teacher passes.

Step distillation (progressive distillation, Salimans & Ho 2022) halves the step count: the
student's Euler step from t_i to t_{i+1} of its schedule must land where two teacher steps land,
t_i -> t_mid -> t_{i+1} on the schedule of twice the steps. The model's flow shift makes the
student's schedule every other time of the teacher's (ModelSpec.schedule), so the teacher runs
exactly the steps a session asking for twice the steps runs. The target is the velocity of that
two-step move: the two teacher velocities weighted by the time each covers.
"""

from __future__ import annotations

import torch

from .config import EmbeddedConfig
from .dit import CausalDiT
from .flow import clip_text, clip_velocity, noised, recycled_past, sample_times
from .masks import block_causal_context
from .model import prompt_tokens
from .self_rollout import SelfRollout


def past_times(cfg: EmbeddedConfig, b: int, t: int) -> torch.Tensor:
    """Flow times (B, T) for the frames of a clip's past, in the shape of inference: the time
    chunks are committed at (`context_noise`, 0: clean) plus the training's small-noise augmentation."""
    return cfg.context_noise + torch.rand(b, t) * 0.05


def own_past(student: CausalDiT, x0: torch.Tensor, cfg: EmbeddedConfig, data: dict[str, torch.Tensor],
             recycle: float, among: torch.Tensor | None = None) -> torch.Tensor:
    """x0 with the past of a share `recycle` of the clips (of those marked in `among` (B,) bool,
    default all) replaced by the student's own estimate of it (flow.recycled_past): teacher and
    student then both see it, so the student learns what a teacher trained on such pasts does with them."""
    if recycle <= 0:
        return x0
    b, t = x0.shape[:2]
    past = torch.arange(t)[None] < t - cfg.frames_per_chunk
    chosen = torch.rand(b, 1) < recycle
    if among is not None:
        chosen &= among[:, None]
    return recycled_past(student, x0, past & chosen, data, cfg)


def teacher_problem(cfg: EmbeddedConfig) -> str | None:
    """Why weights with this config cannot teach guidance distillation (None: they can).

    The student learns one guided velocity for every time, so the teacher must be guided on
    every step: a scale other than 1 and no unguided low-noise steps (guidance_min_t 0).
    """
    if cfg.guidance_scale == 1.0 or cfg.guidance_min_t > 0:
        return (f"guidance_scale {cfg.guidance_scale}, guidance_min_t {cfg.guidance_min_t}: "
                "distillation needs a teacher guided on every step")  # fmt: skip
    return None


def guided_velocity(teacher: CausalDiT, x_t: torch.Tensor, t_frame: torch.Tensor, data: dict[str, torch.Tensor],
                    cfg: EmbeddedConfig, scale: float) -> torch.Tensor:
    """The teacher's guided velocity vu + s (vc - vu) on the last chunk of a clip -> (B, F, C, h, w).

    Both passes run in one batch: under the clip's prompts, and with the last chunk's prompt
    swapped for the empty one (the earlier chunks keep theirs, as the cache does at inference).
    """
    b, t = x_t.shape[:2]
    f = cfg.frames_per_chunk
    tokens = data["tokens"]
    if scale == 1.0:  # an unguided teacher: one pass
        with torch.no_grad():
            return clip_velocity(teacher, x_t, t_frame, data, cfg)[:, -f:]
    uncond_tokens = tokens.clone()
    uncond_tokens[:, -f:] = prompt_tokens("", cfg.dit.max_tokens)[0]
    with torch.no_grad():
        v = teacher(x_t.repeat(2, 1, 1, 1, 1), t_frame.repeat(2, 1),
                    clip_text(teacher, torch.cat([tokens, uncond_tokens])),
                    data["actions"].repeat(2, 1), data["controls"].repeat(2, 1, 1),
                    block_causal_context(2 * b, t, f, cfg.dit.tokens_per_frame))[:, -f:]
    return torch.lerp(v[b:], v[:b], scale)


def guidance_distill_loss(student: CausalDiT, teacher: CausalDiT, data: dict[str, torch.Tensor],
                          cfg: EmbeddedConfig, scale: float, recycle: float = 0.0) -> torch.Tensor:
    """Mean squared error between the student's velocity and the teacher's guided one, on the
    last chunk (`recycle`: see own_past)."""
    x0 = own_past(student, data["x0"], cfg, data, recycle)
    b, t = x0.shape[:2]
    f = cfg.frames_per_chunk
    t_frame = past_times(cfg, b, t)
    t_frame[:, -f:] = sample_times(cfg, (b, 1))
    x_t, _ = noised(x0, t_frame)
    return last_chunk_error(student, x_t, t_frame, data, cfg, guided_velocity(teacher, x_t, t_frame, data, cfg, scale))


def last_chunk_error(student: CausalDiT, x_t: torch.Tensor, t_frame: torch.Tensor, data: dict[str, torch.Tensor],
                     cfg: EmbeddedConfig, target: torch.Tensor) -> torch.Tensor:
    """Mean squared error of the student's velocity on the last chunk against `target`."""
    pred = clip_velocity(student, x_t, t_frame, data, cfg)
    return ((pred[:, -cfg.frames_per_chunk:] - target) ** 2).mean()


def two_step_velocity(teacher: CausalDiT, x_t: torch.Tensor, t_frame: torch.Tensor, data: dict[str, torch.Tensor],
                      cfg: EmbeddedConfig, scale: float, t_mid: torch.Tensor, t_next: torch.Tensor) -> torch.Tensor:
    """The velocity that moves the last chunk from its time to `t_next` (B,) as two teacher
    Euler steps do, through `t_mid` (B,) -> (B, F, C, h, w)."""
    f = cfg.frames_per_chunk
    bc = (slice(None), None, None, None, None)
    t_now = t_frame[:, -1]
    v1 = guided_velocity(teacher, x_t, t_frame, data, cfg, scale)
    x_mid, t_mid_frame = x_t.clone(), t_frame.clone()
    x_mid[:, -f:] += (t_mid - t_now)[bc] * v1
    t_mid_frame[:, -f:] = t_mid[:, None]
    v2 = guided_velocity(teacher, x_mid, t_mid_frame, data, cfg, scale)
    return ((t_mid - t_now)[bc] * v1 + (t_next - t_mid)[bc] * v2) / (t_next - t_now)[bc]


def halving_grids(student: tuple[float, ...], teacher: tuple[float, ...]) -> tuple[torch.Tensor, ...]:
    """(t_i, t_mid, t_{i+1}) of each student step, from the student's schedule and the teacher's
    schedule of twice the steps, which must hold the student's times at every other place."""
    if len(teacher) != 2 * len(student) or any(abs(a - b) > 1e-6 for a, b in zip(teacher[::2], student, strict=True)):
        raise ValueError(f"the teacher's schedule {teacher} must be the student's {student} with a time between "
                         "each pair of its steps")
    t_next = torch.tensor([*student[1:], 0.0])
    return torch.tensor(student), torch.tensor(teacher[1::2]), t_next


def step_distill_loss(student: CausalDiT, teacher: CausalDiT, data: dict[str, torch.Tensor], cfg: EmbeddedConfig,
                      scale: float, grids: tuple[torch.Tensor, ...], recycle: float = 0.0,
                      rollout: SelfRollout | None = None) -> torch.Tensor:
    """Mean squared error between the student's velocity at a time of its schedule and the
    velocity of the teacher's two steps from there (`grids` from `halving_grids`), on the last
    chunk (`recycle`: see own_past). `rollout` (its model's dit the student) gives a share of the
    clips the student's own past, and their last chunk the state its own sampling reaches at the
    step trained (self_rollout.py); recycling then applies to the other clips."""
    rolled = rollout(data) if rollout is not None else None
    b = data["x0"].shape[0]
    real = torch.ones(b, dtype=torch.bool)
    if rolled is not None:
        real[rolled.rows] = False
    x0 = own_past(student, data["x0"] if rolled is None else rolled.x0, cfg, data, recycle, real)
    t = x0.shape[1]
    f = cfg.frames_per_chunk
    step = torch.randint(len(grids[0]), (b,))  # which of the student's steps each clip trains
    t_now, t_mid, t_next = (g[step] for g in grids)
    t_frame = past_times(cfg, b, t)
    t_frame[:, -f:] = t_now[:, None]
    x_t, _ = noised(x0, t_frame)
    if rolled is not None:
        x_t[rolled.rows, -f:] = rolled.states[torch.arange(len(rolled.rows)), step[rolled.rows]]
    return last_chunk_error(student, x_t, t_frame, data, cfg,
                            two_step_velocity(teacher, x_t, t_frame, data, cfg, scale, t_mid, t_next))
