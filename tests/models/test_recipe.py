"""The recipe runs every stage of the shipped model in order, resumably, on a tiny config."""

import json

import torch

from streamer.engine_factory import tiny_embedded
from streamer.models.embedded.model import EmbeddedModel
from streamer.models.embedded.recipe import CONTEXT_NOISE, RECIPES, WIDE, main


def log_of(folder):
    return [json.loads(line) for line in (folder / "training_log.jsonl").read_text().splitlines()]


def test_recipe_runs_every_stage_into_one_student_and_resumes(tmp_path, capsys):
    tiny_embedded().cfg.save(tmp_path / "tiny.json")
    # Scaled down, the stages take 35, 35, 1 and 1 steps (teacher, teacher-wide, guidance-wide,
    # steps-wide).
    argv = ["--run-dir", str(tmp_path / "run"), "--export", str(tmp_path / "weights"), "--config",
            str(tmp_path / "tiny.json"), "--steps-scale", "0.001", "--batch", "2", "--threads", "1",
            "--ckpt-minutes", "60"]  # a checkpoint (and log line) only at each stage's last step
    main(argv)

    student = EmbeddedModel.load(tmp_path / "weights")
    record = json.loads((tmp_path / "weights" / "dit_step.json").read_text())
    assert record == {"step": 1, "stage": "step-distill", "teacher_step": 35, "guidance_scale": 2.0,
                      "teacher_steps": 8}
    # The student runs unguided with the teacher's guidance distilled in; the teacher was guided.
    assert (student.cfg.guidance_scale, student.cfg.distilled_guidance_scale) == (1.0, 2.0)
    assert student.cfg.context_noise == CONTEXT_NOISE > 0  # the shipped inference setting, on the export only
    assert EmbeddedModel.load(tmp_path / "run" / "steps-wide" / "export").cfg.context_noise == 0
    # The wide teacher is a fresh DiT of the WIDE shape, trained from step 0 with the binding loss on
    # the first teacher's autoencoder and latent scale; the student has its shape.
    first = EmbeddedModel.load(tmp_path / "run" / "teacher" / "export")
    wide = EmbeddedModel.load(tmp_path / "run" / "teacher-wide" / "export")
    assert wide.cfg.guidance_scale == 2.0
    assert json.loads((tmp_path / "run" / "teacher-wide" / "export" / "dit_step.json").read_text()) == {
        "step": 35, "bind": 1.0}
    for model in (wide, student):
        assert (model.cfg.dit.dim, model.cfg.dit.heads, model.cfg.dit.depth) == WIDE != (
            first.cfg.dit.dim, first.cfg.dit.heads, first.cfg.dit.depth)
        assert model.cfg.latent_scale == first.cfg.latent_scale != 1.0  # measured from the trained encoder
        for key, value in first.ae.state_dict().items():
            assert torch.equal(model.ae.state_dict()[key], value), key
    log = log_of(tmp_path / "weights")
    assert [e["stage"] for e in log] == ["flow-matching", "flow-matching", "guidance-distill", "step-distill"]
    assert [e["step"] for e in log] == [35, 35, 1, 1]
    assert {"psnr_db", "latent_std"} <= set(json.loads((tmp_path / "weights" / "ae_eval.json").read_text()))
    assert [stage.name for stage in RECIPES["embedded"]] == ["teacher", "teacher-wide", "guidance-wide", "steps-wide"]

    # Run again: every stage is finished, so nothing trains and the student is the same.
    before = (tmp_path / "weights" / "embedded.safetensors").read_bytes()
    main(argv)
    assert (tmp_path / "weights" / "embedded.safetensors").read_bytes() == before
    assert len(log_of(tmp_path / "weights")) == len(log)
    out = capsys.readouterr().out
    assert "recipe stage 4/4: steps-wide (1 steps)" in out
