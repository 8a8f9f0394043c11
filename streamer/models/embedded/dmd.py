"""Distribution matching on the student's own rollouts (`train --dmd TEACHER`), Self-Forcing's loss.

Regressing a student onto its teacher's steps after the student's own past (`--self-rollout`)
teaches it to continue that past's errors: the teacher, shown a past with the object in the wrong
colour, keeps the wrong colour (docs/model.md, "Distilled on its own rollouts"). Distribution
matching distillation (DMD, Yin et al. 2024; DMD2; Self-Forcing, Huang et al. 2025) does not
regress onto anything. It moves the student's outputs along the difference of two scores of the
noised output: the teacher's (the "real" score, guided) and a critic's that is trained, as it goes,
on the student's own outputs (the "fake" score). The step makes the student's distribution more
like the teacher's and less like its own present one.

Here, on every training clip:
- The student rolls itself out through the inference path (self_rollout.SelfRollout, every clip),
  so the clip's past is what a session's cache would hold, and samples the last chunk after it.
- The generated chunk is the student's clean estimate at a random step of its schedule ("exit
  step"), the only pass that carries a gradient.
- The whole clip, past and generated chunk, is noised to one time t. The model is block-causal,
  so its prediction for the last chunk is the score of the whole clip with respect to that chunk:
  at a large t the past is mostly noise and the prompt decides, so a wrong past is not rewarded.
- The critic (initialised from a base model, trained with flow matching on the generated clips,
  every chunk) is stepped on every clip; the student on every `every`-th one only, as Self-Forcing
  steps its critic five times per generator step. The critic is run unguided, the teacher guided.
"""

from __future__ import annotations

import numpy as np
import torch

from ..base import warp
from .config import EmbeddedConfig
from .distill import guided_velocity, past_times
from .dit import CausalDiT
from .flow import clip_velocity, noised
from .model import EmbeddedModel
from .self_rollout import MAX_CHUNKS, RolledClips, SelfRollout

# The student's EMA decay (Self-Forcing's): its steps are few, a 0.999 EMA would barely move.
DMD_EMA = 0.99
# The times (before the model's shift) the scores are read at: DMD leaves out the ends, where a
# score says nothing (t ~ 0) or nothing about the sample (t ~ 1).
SCORE_TIMES = (0.02, 0.98)


def score_times(cfg: EmbeddedConfig, b: int) -> torch.Tensor:
    """A flow time per clip (B,), uniform in SCORE_TIMES warped by the model's shift."""
    lo, hi = SCORE_TIMES
    u = lo + (hi - lo) * torch.rand(b)
    return torch.tensor([warp(float(s), cfg.timestep_shift) for s in u])


class DistributionMatching:
    """The loss `train_dit` steps the student with; it steps its critic itself.

    `model` carries the student's config and autoencoder; its `dit` is the student being trained.
    """

    def __init__(self, model: EmbeddedModel, teacher: CausalDiT, scale: float, critic: CausalDiT,
                 critic_lr: float, every: int, max_chunks: int = MAX_CHUNKS):
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self.cfg, self.teacher, self.scale, self.every = model.cfg, teacher, scale, every
        self.rollout = SelfRollout(model, 1.0, max_chunks)
        self.critic = critic.train().requires_grad_(True)
        self.critic_opt = torch.optim.AdamW(critic.parameters(), lr=critic_lr, betas=(0.0, 0.999), weight_decay=0.0)
        self.calls = 0
        self.critic_losses: list[float] = []

    def __call__(self, student: CausalDiT, data: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Steps the critic on one batch of the student's rollouts; on every `every`-th call also
        returns the student's DMD loss (None on the others: that call trains the critic only)."""
        student_turn = self.calls % self.every == self.every - 1
        self.calls += 1
        rolled = self.rollout(data)
        assert rolled is not None  # every clip is rolled out (share 1)
        with torch.set_grad_enabled(student_turn):
            x0_gen = self.exit_estimate(student, rolled, data)
        loss = self.student_loss(rolled.x0, x0_gen, data) if student_turn else None
        # After the student's loss: the critic has not seen these clips when it scores them.
        self.critic_step(torch.cat([rolled.x0[:, : -self.cfg.frames_per_chunk], x0_gen.detach()], 1), data)
        return loss

    def exit_estimate(self, student: CausalDiT, rolled: RolledClips, data: dict[str, torch.Tensor]) -> torch.Tensor:
        """The student's clean estimate of each clip's last chunk (B, F, C, h, w) from its own
        sampling state at a random step of its schedule, after its rolled past (at the time the
        past is committed at, as in distill.step_distill_loss)."""
        cfg, f = self.cfg, self.cfg.frames_per_chunk
        b, t = rolled.x0.shape[:2]
        step = torch.randint(len(cfg.timesteps), (b,))
        t_now = torch.tensor(cfg.timesteps)[step]
        t_frame = past_times(cfg, b, t)
        t_frame[:, -f:] = t_now[:, None]
        x_t, _ = noised(rolled.x0, t_frame)
        x_t[:, -f:] = rolled.states[torch.arange(b), step]
        v = clip_velocity(student, x_t, t_frame, data, cfg)[:, -f:]
        return x_t[:, -f:] - t_now[:, None, None, None, None] * v

    def student_loss(self, clips: torch.Tensor, x0_gen: torch.Tensor, data: dict[str, torch.Tensor]) -> torch.Tensor:
        """DMD: 0.5 |x0 - sg(x0 - g)|^2, whose gradient moves the generated chunk x0 by
        g = (fake estimate - real estimate) / mean |x0 - real estimate| (per clip, DMD's normaliser)."""
        f = self.cfg.frames_per_chunk
        x = torch.cat([clips[:, :-f], x0_gen.detach()], 1)
        b, t = x.shape[:2]
        t_clip = score_times(self.cfg, b)
        t_frame = t_clip[:, None].expand(b, t).contiguous()
        x_t, _ = noised(x, t_frame)
        bc = t_clip[:, None, None, None, None]
        with torch.no_grad():
            real = x_t[:, -f:] - bc * guided_velocity(self.teacher, x_t, t_frame, data, self.cfg, self.scale)
            fake = x_t[:, -f:] - bc * clip_velocity(self.critic, x_t, t_frame, data, self.cfg)[:, -f:]
        norm = (x0_gen.detach() - real).abs().mean(dim=(1, 2, 3, 4), keepdim=True).clamp(min=1e-6)
        g = torch.nan_to_num((fake - real) / norm)
        return 0.5 * ((x0_gen - (x0_gen - g).detach()) ** 2).mean()

    def critic_step(self, clips: torch.Tensor, data: dict[str, torch.Tensor]) -> float:
        """One flow-matching step of the critic on generated clips (B, T, C, h, w), every chunk at
        the clip's one time, as the student's loss reads it -> the loss."""
        b, t = clips.shape[:2]
        t_frame = score_times(self.cfg, b)[:, None].expand(b, t).contiguous()
        x_t, noise = noised(clips, t_frame)
        loss = ((clip_velocity(self.critic, x_t, t_frame, data, self.cfg) - (noise - clips)) ** 2).mean()
        self.critic_opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.critic.parameters(), 1.0)
        self.critic_opt.step()
        self.critic_losses.append(loss.item())
        return loss.item()

    def log_fields(self) -> dict[str, float]:
        return {"critic_loss": float(np.mean(self.critic_losses[-100:]))} if self.critic_losses else {}

    def state_dict(self) -> dict:
        return {"critic": self.critic.state_dict(), "critic_opt": self.critic_opt.state_dict(), "calls": self.calls}

    def load_state_dict(self, state: dict) -> None:
        self.critic.load_state_dict(state["critic"])
        lr = self.critic_opt.param_groups[0]["lr"]
        self.critic_opt.load_state_dict(state["critic_opt"])
        for g in self.critic_opt.param_groups:  # this run's rate, as train_dit sets the student's
            g["lr"] = lr
        self.calls = state["calls"]
