"""`benchmarks/dit_shapes.py`: a shape is the weights' model with only the DiT's width, heads and
depth changed, its FLOP count grows with depth as the blocks' share says, bad shapes are refused,
and a whole run writes each shape's figures and ratios. Its figures on real weights are not tested."""

from __future__ import annotations

import argparse
import json

import pytest
import torch

from benchmarks import dit_shapes
from tests.models.test_causal_equivalence import tiny_model


def test_a_shape_changes_only_the_dit_and_keeps_the_autoencoder():
    base = tiny_model()
    wide = dit_shapes.shaped(base, 64, 4, 3)
    assert (wide.cfg.dit.dim, wide.cfg.dit.heads, wide.cfg.dit.depth) == (64, 4, 3)
    assert wide.ae is base.ae and wide.cfg.autoencoder == base.cfg.autoencoder
    assert wide.cfg.frames_per_chunk == base.cfg.frames_per_chunk and wide.spec.timesteps == base.spec.timesteps
    assert len(wide.dit.blocks) == 3 and wide.dit.blocks[0].qkv.weight.shape == (3 * 64, 64)


def test_flops_grow_with_depth_by_what_a_block_costs():
    base = tiny_model()
    d = base.cfg.dit
    one, two, four = (dit_shapes.flops_per_frame(dit_shapes.shaped(base, d.dim, d.heads, n), 3) for n in (1, 2, 4))
    assert one < two < four
    assert four - two == pytest.approx(2 * (two - one), rel=1e-6)  # each block the same work


@pytest.mark.parametrize("text", ["base", "b=128:2", "b=128:0:8", "b=100:3:8", "=128:2:8", "b=130:2:8x"])
def test_bad_shapes_are_refused_with_the_form(text):
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=DIM:HEADS:DEPTH|even size"):
        dit_shapes.parse_shape(text)


def test_writes_each_shape_and_its_ratio_to_the_baseline(tmp_path):
    tiny_model().save(tmp_path / "tiny")
    d = tiny_model().cfg.dit
    out = tmp_path / "dit_shapes.json"
    torch.manual_seed(0)
    assert dit_shapes.main(["--weights", str(tmp_path / "tiny"), "--shapes", f"base={d.dim}:{d.heads}:{d.depth}",
                            f"deeper={d.dim}:{d.heads}:{d.depth + 2}", "--batches", "1", "2", "--chunks", "2",
                            "--rounds", "1", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["baseline"] == "base" and list(result["shapes"]) == ["base", "deeper"]
    assert result["shapes"]["deeper"]["dit_params"] > result["shapes"]["base"]["dit_params"]
    assert result["shapes"]["deeper"]["gflop_per_frame"] > result["shapes"]["base"]["gflop_per_frame"]
    assert [r["batch"] for r in result["batches"]] == [1, 2]
    for row in result["batches"]:
        assert row["deeper_ratio"] == pytest.approx(row["deeper_frames_per_s"] / row["base_frames_per_s"])


def test_a_missing_weights_folder_is_a_clear_error(tmp_path, capsys):
    assert dit_shapes.main(["--weights", str(tmp_path / "none"), "--out", str(tmp_path / "o.json")]) == 2
    assert "none" in capsys.readouterr().err
