"""benchmarks/headline_design.py: the next design (base rows, two CPT lengths, a bracketing lr grid, orders as the
unit) runs end to end on its tiny preset, a pilot cut short keeps whole orders, and "≈" is scored by TOST."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _design():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("headline_design", BENCH / "headline_design.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_approx_is_matched_only_inside_the_margin_and_presets_bracket_their_rates():
    design = _design()
    no_difference = {"direction": "~"}
    assert design.score_row("~", no_difference, "ir", [20.0, 21.0], [0.3, -0.2, 0.1, 0.0]) == "match (within ±2)"
    assert design.score_row("~", no_difference, "ir", [20.0, 21.0], [5.0, -4.0, 6.0, -3.0]).startswith("null")
    assert design.score_row(">", {"direction": ">"}, "tc", [20.0, 21.0], [3.0, 4.0]) == "match"
    for name in ("design-cpu", "gpu-pilot", "gpu-design"):
        p = design.PRESETS[name]
        assert len(p["orders"]) >= 4 and len(p["cpt_steps"]) == 2 and len(p["ft_lrs"]) == 3
        assert min(p["ft_lrs"]) < 5e-4 < max(p["ft_lrs"])  # brackets the cpu runs' choice
    assert design.PRESETS["gpu-pilot"]["pilot"] and design.PRESETS["gpu-pilot"]["deadline_s"] <= 540


def test_prepare_only_builds_every_orders_inputs_and_trains_nothing(tmp_path):
    design = _design()
    assert design.run("design-tiny", tmp_path, prepare_only=True) is None
    for order in (0, 1):
        work = tmp_path / f"order{order}"
        assert (work / "config.json").is_file() and (work / "tokenizer").is_dir() and (work / "corpus.json").is_file()
    assert (tmp_path / "texts.jsonl.gz").is_file() and not list(tmp_path.glob("order*/*.jsonl"))  # a compact carry
    assert not list(tmp_path.glob("order*/*-base")) and not (tmp_path / "eval").exists()


@pytest.mark.slow
def test_the_tiny_design_writes_base_rows_both_lengths_and_keeps_whole_orders(tmp_path):
    design = _design()
    result = design.run("design-tiny", tmp_path, threads=1)
    labels = [row["comparison"] for row in result["rows"]]
    assert labels[::4] == ["bases, no CPT", "CPT 2 steps (short)", "CPT 4 steps (long)"]
    assert result["orders_analysed"] == [0, 1] and all(r["test"]["unit"] == "data orders" for r in result["rows"])
    assert all((r["predicted"] is None) == (r["comparison"] == "bases, no CPT") for r in result["rows"])
    text = (tmp_path / "design.md").read_text()
    assert "pretraining tokens per parameter" in text and "Scored as pre-registered" in text and "PILOT" not in text
    plateaus = result["base_plateau"]
    assert sorted(plateaus) == ["clm-order0", "clm-order1", "mlm-order0", "mlm-order1"]
    assert all(v["drop"] == pytest.approx(v["loss_before"] - v["loss_last"]) for v in plateaus.values())
    assert "Bases' training loss over their last tenth" in text
    next((tmp_path / "eval" / "mlm-cpt4-order1" / "qa").rglob("results.json")).unlink()  # order 1 cut short
    assert design.complete_orders(tmp_path / "eval", design.PRESETS["design-tiny"]) == [0]
    assert design.main(["--budget", "design-tiny", "--out", str(tmp_path), "--report-only"]) == 0
    reported = (tmp_path / "design.json").read_text()
    assert '"orders_analysed": [\n  0\n ]' in reported and '"clm-order1"' in reported  # facts.json kept the losses
