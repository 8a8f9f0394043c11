"""train.py's distillation commands: `--distill-guidance`, `--distill-steps` and `--dmd`, each a
`train_dit` run of a student beside a frozen teacher (distill.py, dmd.py hold the losses)."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
from pathlib import Path

from .config import EmbeddedConfig, differing_fields
from .distill import guidance_distill_loss, halving_grids, step_distill_loss, teacher_problem
from .dit_training import Schedule, train_dit
from .dmd import DMD_EMA, DistributionMatching
from .model import EmbeddedModel
from .self_rollout import SelfRollout
from .vocab import TWO_OBJECT_SHARE


def load_teacher(args: argparse.Namespace, folder: Path, guided: bool) -> tuple[EmbeddedModel, int]:
    """The teacher in `folder`, frozen, and the training step its weights come from.

    `guided`: it must be guided on every step; otherwise it may also be unguided.
    """
    if args.export.resolve() == folder.resolve():
        raise SystemExit("--export must differ from the teacher's folder: the teacher is reloaded on resume")
    teacher = EmbeddedModel.load(folder)
    problem = teacher_problem(teacher.cfg)
    if problem is not None and (guided or teacher.cfg.guidance_scale != 1.0):
        raise SystemExit(f"{folder}: {problem}")
    teacher.dit.eval().requires_grad_(False)
    return teacher, json.loads((folder / "dit_step.json").read_text())["step"]


def student_init(args: argparse.Namespace, teacher: EmbeddedModel, folder: Path) -> EmbeddedModel:
    """The weights a student starts from: `--init`, or the teacher's own. The init may differ from
    the teacher in depth (`beside_teacher`): a deeper teacher (`--grow-depth`) can teach a student
    the runtime can afford."""
    if args.init is None:
        return teacher
    return beside_teacher(args.init, teacher, folder)


def beside_teacher(path: Path, teacher: EmbeddedModel, folder: Path) -> EmbeddedModel:
    """The model in `path`, which works beside the teacher in `folder` (a student's init, a DMD
    critic): all it may have of its own is its guidance, default schedule and context noise (a
    student's inference choices), and its depth. Everything else fixes what the latents, prompts,
    actions and positions mean, so it must match."""
    model = EmbeddedModel.load(path)
    own = {"guidance_scale", "guidance_min_t", "distilled_guidance_scale", "timesteps", "context_noise", "dit.depth"}
    differ = [name for name in differing_fields(model.cfg, teacher.cfg) if name not in own]
    if differ:
        raise SystemExit(f"{path}: config field '{differ[0]}' differs from the teacher's in {folder}")
    return model


def student_cfg(args: argparse.Namespace, init: EmbeddedModel) -> EmbeddedConfig:
    """The init's config with `--context-noise` (when given): the student's past is then trained
    at the time its chunks will be committed at (distill.past_times)."""
    if args.context_noise is None:
        return init.cfg
    return dataclasses.replace(init.cfg, context_noise=args.context_noise)


def run_schedule(args: argparse.Namespace) -> Schedule:
    """The run's dirs, length, rate and pace from train.py's flags."""
    return Schedule(args.run_dir, args.export, args.dit_steps, args.lr, args.cooldown_steps, args.stop_at,
                    args.batch, args.seed, args.ckpt_minutes)


def data_record(args: argparse.Namespace) -> dict[str, float]:
    """The run's error-recycling, two-object and self-rollout shares and its binding weight for its
    exported record (each only when it is not the default)."""
    return ({"recycle": args.recycle} if args.recycle else {}) | ({"bind": args.bind} if args.bind else {}) | (
        {"two_objects": args.two_objects} if args.two_objects != TWO_OBJECT_SHARE else {}) | (
        {"self_rollout": args.self_rollout} if args.self_rollout else {})


def distill_guidance(args: argparse.Namespace) -> None:
    """Guidance distillation (distill.py): the student starts as the teacher (or as `--init`) and
    runs unguided."""
    teacher, teacher_step = load_teacher(args, args.distill_guidance, guided=True)
    init = student_init(args, teacher, args.distill_guidance)
    scale = teacher.cfg.guidance_scale
    cfg = dataclasses.replace(student_cfg(args, init), guidance_scale=1.0, guidance_min_t=0.0,
                              distilled_guidance_scale=scale)
    model = EmbeddedModel(cfg, ae=teacher.ae, dit=copy.deepcopy(init.dit).requires_grad_(True))
    train_dit(model, run_schedule(args), lambda net, data: guidance_distill_loss(net, teacher.dit, data, cfg, scale, args.recycle),
              {"stage": "guidance-distill", "teacher_step": teacher_step, "guidance_scale": scale, **data_record(args)})


def distill_steps(args: argparse.Namespace) -> None:
    """Step distillation (distill.py): the student's default schedule does in each step what the
    teacher (guided or not) does in two. The student starts from `--init` (default: the teacher),
    e.g. a guidance-distilled student of the same teacher, which then stays unguided."""
    teacher, teacher_step = load_teacher(args, args.distill_steps, guided=False)
    init = student_init(args, teacher, args.distill_steps)
    steps = args.student_steps or init.spec.default_steps
    cfg = dataclasses.replace(student_cfg(args, init), timesteps=init.spec.schedule(steps))
    scale = teacher.cfg.guidance_scale
    if scale != 1.0:  # a guided teacher's student runs unguided: the guidance is in its targets
        cfg = dataclasses.replace(cfg, guidance_scale=1.0, distilled_guidance_scale=scale)
    # The teacher's autoencoder: its targets live in its latent space. A student from weights whose
    # encoder was older (docs/model.md, "A sharper latent space") learns the new latents here.
    model = EmbeddedModel(cfg, ae=teacher.ae, dit=copy.deepcopy(init.dit).requires_grad_(True))
    grids = halving_grids(model.spec.schedule(steps), teacher.spec.schedule(2 * steps))
    rollout = SelfRollout(model, args.self_rollout) if args.self_rollout else None  # model.dit is the trained net
    train_dit(model, run_schedule(args),
              lambda net, data: step_distill_loss(net, teacher.dit, data, cfg, scale, grids, args.recycle, rollout),
              {"stage": "step-distill", "teacher_step": teacher_step, "guidance_scale": scale,
               "teacher_steps": 2 * steps, **data_record(args)})


def distill_dmd(args: argparse.Namespace) -> None:
    """Distribution matching on the student's own rollouts (dmd.py): the student starts from
    `--init`, runs unguided, and is scored by the teacher (guided at its scale) against a critic
    that starts from `--critic` (default: the teacher's weights)."""
    teacher, teacher_step = load_teacher(args, args.dmd, guided=False)
    init = beside_teacher(args.init, teacher, args.dmd)
    critic = teacher if args.critic is None else beside_teacher(args.critic, teacher, args.dmd)
    scale = teacher.cfg.guidance_scale
    cfg = dataclasses.replace(student_cfg(args, init), guidance_scale=1.0, guidance_min_t=0.0,
                              distilled_guidance_scale=scale)
    model = EmbeddedModel(cfg, ae=teacher.ae, dit=copy.deepcopy(init.dit).requires_grad_(True))
    loss = DistributionMatching(model, teacher.dit, scale, copy.deepcopy(critic.dit), args.critic_lr or args.lr,
                                args.critic_every)
    train_dit(model, run_schedule(args), loss,
              {"stage": "dmd", "teacher_step": teacher_step, "guidance_scale": scale,
               "critic_every": args.critic_every, **data_record(args)},
              companion=loss, ema_max=DMD_EMA, encode=False)
