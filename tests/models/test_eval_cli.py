"""`streamer eval --quick --json` on the shipped weights: runs, and prints the contract's keys."""

import json

from streamer.cli import main as streamer_main

CONTRACT = ("prompt_adherence", "motion_accuracy", "action_response_frames", "avatar_mouth_corr",
            "redirect_chunks", "drift_points", "fps_single", "frame_size")


def test_quick_eval_prints_contract_json(capsys):
    code = streamer_main(["eval", "--quick", "--json", "--threads", "1"])
    assert code in (0, None)
    last = capsys.readouterr().out.strip().splitlines()[-1]
    res = json.loads(last)
    for key in CONTRACT:
        assert key in res, key
    assert res["drift_points"] is None  # quick mode skips the long rollout
    assert res["frame_size"] == [128, 128]
    assert 0.0 <= res["prompt_adherence"] <= 1.0 and 0.0 <= res["motion_accuracy"] <= 1.0
    assert res["fps_single"] > 0
