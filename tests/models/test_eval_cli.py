"""`streamer eval --quick --json` on the shipped weights: runs, and prints the contract's keys;
`--device cuda` on a machine without CUDA is a clear error."""

import json

import pytest
import torch

from streamer.cli import main as streamer_main
from streamer.models.embedded.evaluate_cli import paired_drift

CONTRACT = ("prompt_adherence", "motion_accuracy", "action_response_frames", "avatar_mouth_corr",
            "redirect_chunks", "drift_points", "fps_single", "frame_size")


def test_quick_eval_prints_contract_json(capsys):
    code = streamer_main(["eval", "--quick", "--json", "--threads", "1"])
    assert code in (0, None)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    res = json.loads(last)
    for key in CONTRACT:
        assert key in res, key
    assert res["drift_points"] is None and res["drift_stderr_points"] is None  # quick mode skips the long rollout
    assert res["frame_size"] == [128, 128]
    assert (res["weights"], res["depth"]) == ("embedded", 6)  # the default: 6 blocks at width 192
    assert res["device"] == "cpu"
    assert 0.0 <= res["prompt_adherence"] <= 1.0 and 0.0 <= res["motion_accuracy"] <= 1.0
    assert res["fps_single"] > 0
    # The autoencoder's own round trip of rendered clips: the ceiling of the story figures.
    assert 0.0 <= res["autoencoder_adherence"] <= 1.0 and res["autoencoder_psnr_db"] > 20
    # ...measured on this host, named with its matmul peak (streamer/hostinfo.py)
    assert res["host"]["cpu"] and res["host"]["threads"] == 1 and res["host"]["matmul_peak_gflops"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error a machine without CUDA gives")
def test_eval_device_cuda_without_cuda_exits_2(capsys):
    assert streamer_main(["eval", "--quick", "--json", "--device", "cuda"]) == 2
    out, err = capsys.readouterr()
    assert "streamer eval: error:" in err and "CUDA is not available" in err and "--device cpu" in err
    assert out == ""  # no figures: nothing ran


def test_eval_threads_must_be_positive(capsys):
    with pytest.raises(SystemExit) as exc:
        streamer_main(["eval", "--quick", "--threads", "0"])
    assert exc.value.code == 2
    assert "argument --threads: must be at least 1, got 0" in capsys.readouterr().err


def test_eval_bad_guidance_exits_2(capsys):
    assert streamer_main(["eval", "--quick", "--json", "--guidance", "0"]) == 2
    out, err = capsys.readouterr()
    assert "streamer eval: error:" in err and "guidance needs scale > 0" in err
    assert out == ""


def test_drift_is_the_mean_of_each_clips_change_with_its_standard_error():
    # Per clip, in points: -50, 0, +100, 0. Paired: a clip that starts wrong and stays wrong adds nothing.
    res = paired_drift(early=[1.0, 1.0, 0.0, 0.5], late=[0.5, 1.0, 1.0, 0.5])
    assert res["drift_points"] == pytest.approx(12.5)
    assert res["drift_stderr_points"] == pytest.approx((11875 / 3) ** 0.5 / 2)  # sample sd over sqrt(4)
    assert paired_drift([0.2], [0.7]) == {"drift_points": pytest.approx(50.0), "drift_stderr_points": None}
