"""Train the embedded model from a seed: `python -m streamer.models.embedded.train`.

Two stages, each resumable from `--run-dir` (checkpoints every few minutes):
1. the frame autoencoder, on single frames of the procedural world;
2. the block-causal DiT, on latent clips with flow matching and diffusion forcing:
   every chunk gets its own noise level under a block-causal mask, and half the clips have
   a clean past before the chunk being denoised, the shape of inference. Clips are as long
   as the streaming view (sinks + window + chunk); half of them have a time gap after the
   sink chunk, because in a long stream the sinks are old. Prompts switch mid-clip so
   redirects are learned, and a tenth of the chunks are trained under the empty prompt so
   that classifier-free guidance has an unconditional prediction to steer away from.
   `--recycle P` gives a share of the clean pasts the model's own errors (flow.recycled_past);
   `--two-objects P` sets the share of story clips with two objects (default 0.3);
   `--bind W` adds binding.py's loss on the prompt encoder at weight W (which object each word
   describes).

Two optional stages distil (distill.py): `--distill-guidance TEACHER` turns a guided model into
one that needs one pass a step, and `--distill-steps TEACHER` makes a model's every step do what
two of the teacher's do. The shipped weights went through both (docs/model.md, Guidance
distillation and Step distillation); recipe.py runs all the stages in order in one command.
`--dmd TEACHER` (dmd.py) trains such a student further by distribution matching on its own
rollouts, scored by TEACHER against a critic trained beside it.

The EMA weights are exported to `streamer/models/embedded/weights/` (or `--export`) at every
checkpoint, so the shipped model is always the latest one, and a sample sheet of them is written
to `<run-dir>/samples/` (see samples.py).

This file is the command line; the stages live in autoencoder_training.py, dit_training.py (the
DiT loop every stage shares) and distill_commands.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from ...argtypes import non_negative, positive_int, share, unit_interval
from .atomic_save import write_text_atomically
from .autoencoder_training import evaluate_autoencoder, finetune_autoencoder, train_autoencoder
from .config import EmbeddedConfig
from .distill_commands import data_record, distill_dmd, distill_guidance, distill_steps, run_schedule
from .dit import CausalDiT
from .dit_training import dit_loss, train_dit
from .grow import grown_dit
from .model import WEIGHTS_DIR, EmbeddedModel
from .vocab import TWO_OBJECT_SHARE


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run-dir", type=Path, default=Path("runs/embedded"))
    ap.add_argument("--export", type=Path, default=WEIGHTS_DIR)
    ap.add_argument("--ae-steps", type=int, default=1500)
    ap.add_argument("--dit-steps", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--config", type=Path, default=None, help="model config JSON (default: the shipped one)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=positive_int, default=2)
    ap.add_argument("--ckpt-minutes", type=float, default=3.0)
    ap.add_argument("--cooldown-steps", type=int, default=0,
                    help="the learning rate falls linearly to zero over the last N of --dit-steps")
    ap.add_argument("--stop-at", type=positive_int, default=None, metavar="STEP",
                    help="checkpoint and stop at STEP, short of --dit-steps, whose learning-rate schedule stays: "
                         "one session's share of a run that spans several")
    ap.add_argument("--decoder-steps", type=int, default=0,
                    help="instead of training: fine-tune the decoder of the model in --export for N steps "
                         "(encoder frozen, so the DiT needs no retraining) and save it back, at --lr (cosine)")
    ap.add_argument("--autoencoder-steps", type=int, default=0,
                    help="instead of training: fine-tune the whole autoencoder of the model in --export for N steps "
                         "(the latents move: train its DiT on them next) and save it back, at --lr (cosine)")
    for name, what in (("blocks", "residual blocks at the latent grid"), ("mid-blocks", "residual blocks at twice it"),
                       ("fine-channels", "channels of a stage at four times it (0: none)")):
        ap.add_argument(f"--dec-{name}", type=int, default=None,
                        help=f"with --decoder-steps or --autoencoder-steps: grow the decoder to this many {what}")
    ap.add_argument("--grow-depth", type=positive_int, default=None, metavar="N",
                    help="instead of training: grow the DiT of the model in --export to N blocks (the added ones "
                         "start as the identity: the model predicts what it did) and save it back; a run with "
                         "that --export then warm-starts from it (docs/model.md, A deeper teacher)")
    ap.add_argument("--distill-guidance", type=Path, default=None, metavar="TEACHER",
                    help="instead of training: distil the guided model in TEACHER (its guidance_scale) "
                         "into one that needs one pass a step, for --dit-steps steps, exported to --export")
    ap.add_argument("--distill-steps", type=Path, default=None, metavar="TEACHER",
                    help="instead of training: distil the model in TEACHER, at twice the student's steps, into one "
                         "that needs the student's steps, for --dit-steps steps, exported to --export")
    ap.add_argument("--init", type=Path, default=None,
                    help="with --distill-guidance, --distill-steps or --dmd: the weights the student starts from "
                         "(default: the teacher's; --dmd needs one); its depth may differ from the teacher's")
    ap.add_argument("--student-steps", type=positive_int, default=None,
                    help="with --distill-steps: the student's default step count (default: the --init weights'); "
                         "the teacher runs twice as many")
    ap.add_argument("--recycle", type=unit_interval, default=0.0, metavar="P",
                    help="the share of clean-past clips whose past is the trained model's own one-pass estimate "
                         "of it (error recycling, docs/model.md); in distillation the teacher sees that past too")
    ap.add_argument("--two-objects", type=share, default=TWO_OBJECT_SHARE, metavar="P",
                    help=f"the share of story clips with two objects (default {TWO_OBJECT_SHARE}, the evaluator's): "
                         "more of them trains binding each motion to its object, the weakest part of rollouts")
    ap.add_argument("--bind", type=non_negative, default=0.0, metavar="W",
                    help="in training: the weight of the binding loss (binding.py), which asks each word of a story "
                         "object to name its whole object in the prompt encoder (default 0: off)")
    ap.add_argument("--self-rollout", type=unit_interval, default=0.0, metavar="P",
                    help="with --distill-steps: the share of clips whose past is the student's own rollout, through "
                         "the inference path, and whose trained chunk starts from its own sampling (self_rollout.py)")
    ap.add_argument("--dmd", type=Path, default=None, metavar="TEACHER",
                    help="instead of training: distil the student in --init by distribution matching on its own "
                         "rollouts, scored by TEACHER (guided at its scale) against a critic (dmd.py), for "
                         "--dit-steps critic steps, every --critic-every-th of them also a student step")
    ap.add_argument("--critic", type=Path, default=None,
                    help="with --dmd: the weights the critic starts from (default: the teacher's)")
    ap.add_argument("--critic-every", type=positive_int, default=5, metavar="N",
                    help="with --dmd: critic steps per student step (default 5, Self-Forcing's)")
    ap.add_argument("--critic-lr", type=float, default=None, help="with --dmd: the critic's learning rate (default: --lr)")
    ap.add_argument("--context-noise", type=unit_interval, default=None, metavar="T",
                    help="with --distill-guidance, --distill-steps or --dmd: the flow time the student commits its past "
                         "at (default: the --init weights'), which its past is trained at")
    args = ap.parse_args(argv)
    if args.decoder_steps and args.autoencoder_steps:
        ap.error("--decoder-steps and --autoencoder-steps are two different fine-tunes: give one")
    if args.dmd is not None and args.init is None:
        ap.error("--dmd needs --init: the few-step student it trains (e.g. a step-distilled one)")
    if args.dmd is not None and args.recycle:
        ap.error("--recycle has no use with --dmd: the student's past is its own rollout")
    if args.bind and (args.distill_guidance or args.distill_steps or args.dmd):
        ap.error("--bind is a loss of training (no --distill-guidance, --distill-steps or --dmd)")
    if args.self_rollout and args.distill_steps is None:
        ap.error("--self-rollout needs --distill-steps: its target is the teacher's steps from the student's own states")
    torch.set_num_threads(args.threads)
    # Subnormal floats take a slow path on x86 CPUs. Some of the autoencoder's gradients became
    # subnormal 7,500 steps into a run (session 38), and each backward pass then took 1.2-1.4 s
    # instead of 0.14: the run went on 6x slower. Flushed to zero, the same step took 0.14 s again;
    # values under 1.2e-38 change nothing that is trained here. The switch is the process's, so
    # it is undone when training returns (the recipe and the tests call `main` in-process).
    torch.set_flush_denormal(True)
    try:
        _train(args)
    finally:
        torch.set_flush_denormal(False)


def _train(args: argparse.Namespace) -> None:
    torch.manual_seed(args.seed)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    if args.decoder_steps or args.autoencoder_steps:
        arch = {k: v for k, v in (("dec_blocks", args.dec_blocks), ("dec_mid_blocks", args.dec_mid_blocks),
                                  ("dec_fine_channels", args.dec_fine_channels)) if v is not None}
        finetune_autoencoder(args.export, args.run_dir, args.decoder_steps or args.autoencoder_steps, args.seed,
                             args.ckpt_minutes, args.lr, arch, decoder_only=bool(args.decoder_steps))
        return
    if args.grow_depth is not None:
        model = EmbeddedModel.load(args.export)
        old = model.cfg.dit.depth
        grown_dit(model, args.grow_depth, args.seed).save(args.export)
        print(f"{args.export}: DiT grown from {old} to {args.grow_depth} blocks", flush=True)
        return
    if args.distill_guidance is not None:
        distill_guidance(args)
        return
    if args.distill_steps is not None:
        distill_steps(args)
        return
    if args.dmd is not None:
        distill_dmd(args)
        return

    cfg = EmbeddedConfig()
    if args.config is not None:
        cfg = EmbeddedConfig.load(args.config)
    elif (args.export / "embedded.json").exists():
        cfg = EmbeddedConfig.load(args.export / "embedded.json")
    if (args.export / "embedded.safetensors").exists() and not (args.run_dir / "ae.pt").exists():
        ae = EmbeddedModel.load(args.export).ae  # resume across sessions from the shipped autoencoder
    else:
        ae = train_autoencoder(cfg, args.run_dir, args.ae_steps, args.seed, args.ckpt_minutes)
    ae_psnr, z_std = evaluate_autoencoder(ae, cfg.autoencoder.image_size)
    if cfg.latent_scale == 1.0:
        cfg = EmbeddedConfig.from_dict({**cfg.to_dict(), "latent_scale": 1.0 / z_std})
    print(f"autoencoder: held-out PSNR {ae_psnr:.2f} dB, latent std {z_std:.3f}", flush=True)
    write_text_atomically(args.run_dir / "ae_eval.json", json.dumps({"psnr_db": ae_psnr, "latent_std": z_std}) + "\n")
    model = EmbeddedModel(cfg, ae=ae)
    torch.manual_seed(args.seed)
    model.dit = CausalDiT(cfg.dit)
    train_dit(model, run_schedule(args), lambda net, data: dit_loss(net, data, cfg, args.recycle, args.bind),
              data_record(args) or None)


if __name__ == "__main__":
    main()
