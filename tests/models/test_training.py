"""A few training steps on a tiny config: the loss falls, and checkpoints resume."""

import json

import numpy as np
import pytest
import torch
from PIL import Image

from streamer.engine_factory import tiny_embedded
from streamer.models.embedded.dit_training import ClipSampler, dit_loss
from streamer.models.embedded.train import main


def test_dit_loss_falls_on_a_fixed_batch():
    model = tiny_embedded()
    torch.manual_seed(0)
    data = ClipSampler(model, np.random.default_rng(0)).sample(4)
    opt = torch.optim.AdamW(model.dit.parameters(), lr=2e-3)
    model.dit.train()

    def loss_at(seed: int) -> float:
        torch.manual_seed(seed)  # the same noise draw every time: only the weights change
        with torch.no_grad():
            return dit_loss(model.dit, data, model.cfg).item()

    before = loss_at(123)
    for step in range(40):
        torch.manual_seed(step)
        loss = dit_loss(model.dit, data, model.cfg)
        opt.zero_grad()
        loss.backward()
        opt.step()
    after = loss_at(123)
    assert after < 0.8 * before, (before, after)


def test_a_sampler_that_does_not_encode_draws_the_same_clips_with_nan_latents():
    model = tiny_embedded()
    real = ClipSampler(model, np.random.default_rng(0)).sample(3)
    blind = ClipSampler(model, np.random.default_rng(0), encode=False).sample(3)
    assert blind["x0"].shape == real["x0"].shape and blind["x0"].isnan().all()
    for key in ("tokens", "actions", "controls"):
        assert torch.equal(blind[key], real[key]), key


def test_training_script_runs_checkpoints_and_resumes(tmp_path):
    # The shipped config is 128x128; a 32x32 tiny one keeps this test to seconds.
    tiny_embedded().cfg.save(tmp_path / "tiny.json")
    common = ["--run-dir", str(tmp_path / "run"), "--export", str(tmp_path / "export"), "--ae-steps", "3",
              "--config", str(tmp_path / "tiny.json"), "--batch", "2", "--threads", "1", "--ckpt-minutes", "0"]
    main([*common, "--dit-steps", "2"])
    assert (tmp_path / "export" / "embedded.safetensors").is_file()
    assert json.loads((tmp_path / "export" / "dit_step.json").read_text())["step"] == 2
    main([*common, "--dit-steps", "4"])
    assert json.loads((tmp_path / "export" / "dit_step.json").read_text())["step"] == 4
    log = [json.loads(line) for line in (tmp_path / "run" / "dit_log.jsonl").read_text().splitlines()]
    assert [e["step"] for e in log] == [1, 2, 3, 4]
    sheets = sorted((tmp_path / "run" / "samples").iterdir())
    assert [p.name for p in sheets] == [f"step_00000{i}.png" for i in (1, 2, 3, 4)]
    # 3 stories, a game, an avatar: 5 rows of 32x32 frames under a 12-pixel label, every 2nd of 16 frames.
    assert Image.open(sheets[-1]).size == (8 * 32, 5 * (32 + 12))


def tiny_run(tmp_path, run: str, steps: int, *flags: str) -> None:
    """Base training of the tiny config in run dir `run`, exporting to tmp_path/export."""
    if not (tmp_path / "tiny.json").exists():
        tmp_path.mkdir(parents=True, exist_ok=True)
        tiny_embedded().cfg.save(tmp_path / "tiny.json")
    main(["--run-dir", str(tmp_path / run), "--export", str(tmp_path / "export"), "--ae-steps", "2",
          "--config", str(tmp_path / "tiny.json"), "--batch", "2", "--threads", "1", "--ckpt-minutes", "0",
          "--dit-steps", str(steps), *flags])


def test_a_warm_start_trains_on_clips_the_runs_before_it_did_not_draw(tmp_path, monkeypatch):
    drawn: list = []
    real = ClipSampler.sample
    monkeypatch.setattr(ClipSampler, "sample", lambda self, b: drawn.append(real(self, b)) or drawn[-1])
    tiny_run(tmp_path, "run", 2)
    tiny_run(tmp_path, "next-session", 4)  # a new run dir: warm start from the export's step 2
    assert len(drawn) == 4
    for a, b in zip(drawn[:2], drawn[2:], strict=True):
        # Not a replay: the exported autoencoder is the run's up to rounding, so a replayed clip's
        # latents would match to ~1e-3 (they did before session 16).
        assert not torch.allclose(a["x0"], b["x0"], atol=0.05)


def test_resuming_from_the_checkpoint_continues_both_random_streams(tmp_path):
    from safetensors.torch import load_file

    tiny_run(tmp_path / "straight", "run", 4)
    tiny_run(tmp_path / "resumed", "run", 2)
    tiny_run(tmp_path / "resumed", "run", 4)
    a = load_file(tmp_path / "straight" / "export" / "embedded.safetensors")
    b = load_file(tmp_path / "resumed" / "export" / "embedded.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)


def test_stop_at_pauses_the_run_in_the_same_learning_rate_schedule(tmp_path):
    from safetensors.torch import load_file

    tiny_run(tmp_path / "straight", "run", 4, "--cooldown-steps", "4", "--lr", "1e-3")
    tiny_run(tmp_path / "paused", "run", 4, "--cooldown-steps", "4", "--lr", "1e-3", "--stop-at", "2")
    paused = tmp_path / "paused"
    assert json.loads((paused / "export" / "dit_step.json").read_text())["step"] == 2
    opt = torch.load(paused / "run" / "dit.pt", weights_only=False)["opt"]
    # The last step taken (index 1) ran at 4 steps' cool-down, factor 3/4, not 2 steps' 1/2.
    assert opt["param_groups"][0]["lr"] == pytest.approx(1e-3 * (2 / 200) * (3 / 4))
    tiny_run(tmp_path / "paused", "run", 4, "--cooldown-steps", "4", "--lr", "1e-3")
    a = load_file(tmp_path / "straight" / "export" / "embedded.safetensors")
    b = load_file(paused / "export" / "embedded.safetensors")
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=0, atol=0, msg=name)


def test_cooldown_brings_the_learning_rate_down_to_the_last_step(tmp_path):
    tiny_run(tmp_path, "run", 4, "--cooldown-steps", "4", "--lr", "1e-3")
    opt = torch.load(tmp_path / "run" / "dit.pt", weights_only=False)["opt"]
    # The rate of the last step taken: warm-up factor 4/200, cool-down factor 1/4.
    assert opt["param_groups"][0]["lr"] == pytest.approx(1e-3 * (4 / 200) * (1 / 4))


def finetuned(tmp_path, *flags):
    """The tiny model saved to an export folder, as loaded before and after `main(flags)` on it."""
    from streamer.models.embedded.model import EmbeddedModel

    tiny_embedded().save(tmp_path / "export")
    before = EmbeddedModel.load(tmp_path / "export")
    main(["--run-dir", str(tmp_path / "run"), "--export", str(tmp_path / "export"), "--threads", "1",
          "--ckpt-minutes", "0", *flags])
    return before, EmbeddedModel.load(tmp_path / "export")


def test_decoder_finetune_keeps_the_encoder_and_saves_back(tmp_path):
    """The DiT's latent space must not move: only decoder weights change, in the exported model."""

    before, after = finetuned(tmp_path, "--decoder-steps", "3")
    enc0, enc1 = before.ae.encoder.state_dict(), after.ae.encoder.state_dict()
    assert all(torch.equal(enc0[k], enc1[k]) for k in enc0)
    dec0, dec1 = before.ae.decoder.state_dict(), after.ae.decoder.state_dict()
    assert any(not torch.equal(dec0[k], dec1[k]) for k in dec0)
    dit0, dit1 = before.dit.state_dict(), after.dit.state_dict()
    assert all(torch.equal(dit0[k], dit1[k]) for k in dit0)
    assert json.loads((tmp_path / "export" / "ae_eval.json").read_text())["psnr_db"] > 0
    assert torch.load(tmp_path / "run" / "decoder.pt", weights_only=False)["step"] == 3


def test_decoder_grows_from_the_old_one(tmp_path):
    """--dec-* flags rebuild the decoder: its config is saved, shared layers start from the old
    weights, the encoder and DiT stay exactly as they were."""
    from streamer.models.embedded.grow import grown_decoder

    model = tiny_embedded()
    grown = grown_decoder(model, {"dec_mid_blocks": 1, "dec_fine_channels": 8})
    old, new = model.ae.decoder.state_dict(), grown.ae.decoder.state_dict()
    shared = [k for k in new if k in old and old[k].shape == new[k].shape]
    assert shared and len(shared) < len(new)  # some layers carried over, the added ones are new
    assert all(torch.equal(old[k], new[k]) for k in shared)
    z = torch.randn(2, model.cfg.autoencoder.latent_channels, 4, 4)
    assert grown.ae.decoder(z).shape == model.ae.decoder(z).shape

    before, after = finetuned(tmp_path, "--decoder-steps", "2", "--dec-mid-blocks", "1", "--dec-fine-channels", "8")
    assert after.cfg.autoencoder.dec_mid_blocks == 1 and after.cfg.autoencoder.dec_fine_channels == 8
    enc0, enc1 = before.ae.encoder.state_dict(), after.ae.encoder.state_dict()
    assert all(torch.equal(enc0[k], enc1[k]) for k in enc0)


def test_autoencoder_finetune_moves_the_encoder_and_keeps_the_dit(tmp_path):

    before, after = finetuned(tmp_path, "--autoencoder-steps", "2")
    enc0, enc1 = before.ae.encoder.state_dict(), after.ae.encoder.state_dict()
    assert any(not torch.equal(enc0[k], enc1[k]) for k in enc0)
    dit0, dit1 = before.dit.state_dict(), after.dit.state_dict()
    assert all(torch.equal(dit0[k], dit1[k]) for k in dit0)
    assert torch.load(tmp_path / "run" / "autoencoder.pt", weights_only=False)["step"] == 2
    with pytest.raises(SystemExit):
        main(["--export", str(tmp_path / "export"), "--decoder-steps", "1", "--autoencoder-steps", "1"])


def rollout_inputs(model, seed: int = 0):
    """A clip of random latents, times, prompts, actions and controls for the DiT of `model`."""
    from streamer.models.embedded.flow import clip_text
    from streamer.models.embedded.masks import block_causal_context

    cfg = model.cfg
    data = ClipSampler(model, np.random.default_rng(seed)).sample(2)
    b, t = data["x0"].shape[:2]
    torch.manual_seed(seed)
    x, times = torch.randn_like(data["x0"]), torch.rand(b, t)
    ctx = block_causal_context(b, t, cfg.frames_per_chunk, cfg.dit.tokens_per_frame)
    return lambda dit: dit(x, times, clip_text(dit, data["tokens"]), data["actions"], data["controls"], ctx)


def test_a_grown_dit_predicts_what_the_old_one_did_and_its_new_blocks_train():
    from streamer.models.embedded.grow import grown_dit, old_block_places

    assert old_block_places(8, 12) == [0, 1, 3, 4, 6, 7, 9, 10]
    model = tiny_embedded()
    torch.manual_seed(1)
    with torch.no_grad():  # a trained model's adaLN and output layers are not zero, as at init
        for p in model.dit.parameters():
            p.add_(0.05 * torch.randn_like(p))
    grown = grown_dit(model, model.cfg.dit.depth + 2)
    assert grown.cfg.dit.depth == len(grown.dit.blocks) == model.cfg.dit.depth + 2
    run = rollout_inputs(model)
    with torch.no_grad():
        torch.testing.assert_close(run(grown.dit), run(model.dit), rtol=0, atol=1e-5)
    run(grown.dit).square().mean().backward()
    added = sorted(set(range(grown.cfg.dit.depth)) - set(old_block_places(model.cfg.dit.depth, grown.cfg.dit.depth)))
    for j in added:
        blk = grown.dit.blocks[j]
        assert blk.ada.weight.grad.abs().sum() > 0 and blk.cross_proj.weight.grad.abs().sum() > 0, j
    with pytest.raises(ValueError, match="cannot grow"):
        grown_dit(model, 1)


def test_training_flushes_subnormal_floats_to_zero(tmp_path, monkeypatch):
    # They made an autoencoder run's backward passes 10x slower (train.py). The switch is the
    # process's: training turns it off again, or the tests after it would run flushed.
    calls = []
    monkeypatch.setattr(torch, "set_flush_denormal", lambda on: calls.append(on) or True)
    finetuned(tmp_path, "--decoder-steps", "1")
    assert calls == [True, False]
    with pytest.raises(ValueError, match="weights not found"):  # a failure inside training
        main(["--run-dir", str(tmp_path / "run"), "--export", str(tmp_path / "nowhere"), "--threads", "1",
              "--decoder-steps", "1"])
    assert calls == [True, False, True, False]


def test_grow_depth_saves_the_grown_model_back_for_a_warm_start(tmp_path):
    tiny_run(tmp_path, "run", 2)
    from streamer.models.embedded.model import EmbeddedModel

    before = EmbeddedModel.load(tmp_path / "export")
    depth = before.cfg.dit.depth + 1
    main(["--run-dir", str(tmp_path / "run"), "--export", str(tmp_path / "export"), "--grow-depth", str(depth)])
    after = EmbeddedModel.load(tmp_path / "export")
    assert after.cfg.dit.depth == depth
    run = rollout_inputs(before)
    with torch.no_grad():
        torch.testing.assert_close(run(after.dit), run(before.dit), rtol=0, atol=1e-5)
    # Training on warm-starts from step 2 at the new depth: the export's config is the grown one.
    main(["--run-dir", str(tmp_path / "grown"), "--export", str(tmp_path / "export"), "--batch", "2",
          "--threads", "1", "--ckpt-minutes", "0", "--dit-steps", "3"])
    assert json.loads((tmp_path / "export" / "dit_step.json").read_text())["step"] == 3
    assert EmbeddedModel.load(tmp_path / "export").cfg.dit.depth == depth
    with pytest.raises(SystemExit, match="config field .dit.depth. differs"):  # the mismatch is named
        tiny_run(tmp_path, "mismatch", 4)


def test_the_two_object_share_reaches_the_clips_and_the_exported_record(tmp_path, monkeypatch):
    from streamer.models.embedded import dit_training

    clips: list = []
    real = dit_training.sample_clip
    monkeypatch.setattr(dit_training, "sample_clip", lambda *a, **k: clips.append(real(*a, **k)) or clips[-1])
    ClipSampler(tiny_embedded(), np.random.default_rng(0), two_objects=1.0).sample(12)
    stories = [spec for clip in clips for spec in clip.specs if spec.kind == "story"]
    assert stories and all(len(spec.objects) == 2 for spec in stories)

    tiny_run(tmp_path, "run", 2, "--two-objects", "1")  # all clips two-object: a share, 1 included
    assert json.loads((tmp_path / "export" / "dit_step.json").read_text()) == {"step": 2, "two_objects": 1.0}
