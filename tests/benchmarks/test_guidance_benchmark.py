"""`benchmarks/guidance.py` on a tiny model: variants parse, every variant is scored on the same
clips, and ratios are against the first. Its figures on the shipped weights are not tested here."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks import guidance
from tests.models.test_causal_equivalence import tiny_model


def test_variant_parses_name_weights_and_optional_scale_and_steps():
    assert guidance.variant("a=shipped") == ("a", None, None, None)
    assert guidance.variant("b=runs/x:2.5") == ("b", Path("runs/x"), 2.5, None)
    assert guidance.variant("c=runs/x:2:8") == ("c", Path("runs/x"), 2.0, 8)
    assert guidance.variant("d=shipped::8") == ("d", None, None, 8)
    for bad in ("shipped", "=shipped:2", "a=", "a=shipped:two", "a=shipped:2:0", "a=shipped::x"):
        with pytest.raises(argparse.ArgumentTypeError):
            guidance.variant(bad)


def test_scores_each_variant_and_reports_ratios_to_the_first(tmp_path):
    tiny_model().save(tmp_path / "tiny")
    out = tmp_path / "guidance.json"
    guidance.main(["--variant", f"plain={tmp_path / 'tiny'}", "--variant", f"guided={tmp_path / 'tiny'}:3:2",
                   "--story", "1", "--game", "1", "--threads", "1", "--out", str(out)])
    rows = json.loads(out.read_text())["variants"]
    assert [(r["name"], r["guidance_scale"], r["steps"]) for r in rows] == [("plain", 1.0, 4), ("guided", 3.0, 2)]
    assert all(r["fps_single"] > 0 for r in rows)
    assert rows[0]["ratios_vs_plain"]["fps_single"] == 1.0
    assert rows[1]["ratios_vs_plain"]["fps_single"] == pytest.approx(rows[1]["fps_single"] / rows[0]["fps_single"])
