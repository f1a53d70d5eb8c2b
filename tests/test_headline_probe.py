"""benchmarks/headline_probe.py, the probe pre-registered in examples/headline/predictions_probe.md: the shrink of the
CLM-minus-MLM base gap is scored as registered, and the whole chain (a long base with its checkpoint, the decayed
branch from it, the random-init control, TC and QA fine-tuning, the table) runs on its smoke preset."""

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _probe():
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location("headline_probe", BENCH / "headline_probe.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shrink_is_scored_as_registered():
    probe = _probe()
    assert probe.score_shrink([12.0, 9.0, 11.0, 10.0], [2.0, 0.0, 1.5, 1.0])["scored"] == "match"  # the gap closes
    assert probe.score_shrink([1.0, 0.0, 1.5, 1.0], [12.0, 9.0, 11.0, 10.0])["scored"] == "reversed"
    assert probe.score_shrink([12.0, 1.0, 11.0, 0.0], [2.0, 9.0, 1.5, 10.0])["scored"] == "null"
    assert probe.score_shrink([5.0, 5.0], [5.0, 5.0])["scored"] == "null"  # zero spread: not testable, not a match
    p = probe.PRESETS["probe-cpu"]
    assert (p["long_steps"], p["short_steps"], p["branch_at"], p["warmup"]) == (3600, 1200, 960, 240)
    assert p["ft_lrs"] == (5e-4, 1.5e-3, 5e-3) and p["orders"] == (0, 1, 2, 3) and p["pretrain_steps"] == 1200
    registered = (BENCH.parent / "examples" / "headline" / "predictions_probe.md").read_text()
    assert "3,600 steps" in registered and "1,200 steps" in registered and "5e-4, 1.5e-3 and 5e-3" in registered


def test_every_verdict_row_carries_its_detectable_shrink_and_power():
    """Beside each family's verdict: the smallest shrink the paired t over the orders detects with 80% power at the
    shrinks' own spread, and the power if the short bases' whole gap closed (issue 71, point 2)."""
    import headline_stats as hs

    probe = _probe()
    short, long = [10.0, 8.0, 12.0, 10.0], [9.0, 3.0, 12.5, 6.0]
    row = {"gaps": {"short": short, "long": long}, **probe.score_shrink(short, long)}
    sd = float(np.std(row["shrink"], ddof=1))
    detectable, power = probe.power_cells(row, 4)
    assert detectable == f"{hs.detectable(sd, 4):.1f}" and float(detectable) > 0
    assert power == f"{hs.t_power(10.0, sd, 4):.0%} (at 10.0)"
    flat = {"gaps": {"short": [1.0, 1.0], "long": [1.0, 1.0]}, **probe.score_shrink([1.0, 1.0], [1.0, 1.0])}
    assert probe.power_cells(flat, 2) == ("n/a (no spread)", "n/a")
    result = {"budget": "probe-cpu", "orders": [0, 1, 2, 3], "short_steps": 1200, "long_steps": 3600,
              "verdict": "mixed", "families": {"tc": row, "qa": row}}
    table = probe.render(result)
    assert f"| {detectable} | {power} |" in table and table.count("| TC |") == 1


@pytest.mark.slow
def test_the_probe_chain_runs_on_its_smoke_preset(tmp_path):
    probe = _probe()
    result = probe.run("probe-tiny", tmp_path, threads=1)
    assert result["verdict"] in ("shrinks", "does not shrink", "mixed") and sorted(result["families"]) == ["qa", "tc"]
    for row in result["families"].values():
        assert row["scored"] in ("match", "reversed", "null") and len(row["gaps"]["short"]) == 2
    order0 = tmp_path / "order0"
    branched = json.loads((order0 / "probe-clm-short" / "run_record.json").read_text())
    assert "step-0000004" in str(branched.get("from_checkpoint")) and branched.get("steps") == 6
    assert not list((tmp_path / "eval" / "random-order0").glob("sc")) and (tmp_path / "eval" / "random-order0").is_dir()
    text = (tmp_path / "probe.md").read_text()
    assert text.startswith("**probe-tiny: a smoke test") and "| TC |" in text and "| QA |" in text
    reported = result["reported"]  # what the registration lists as reported, not scored
    assert sorted(reported["bases"]) == sorted(f"{a}-{n}-order{o}" for a in ("clm", "mlm") for n in ("short", "long")
                                               for o in (0, 1))
    bases = reported["bases"].values()
    assert all(b["eval_loss"] is not None and b["train_loss_last_tenth"] is not None for b in bases)
    assert reported["bases"]["clm-long-order0"]["steps"] == 10 and reported["bases"]["clm-short-order0"]["steps"] == 6
    for family in reported["families"].values():
        assert sorted(family["above_random"]) == ["clm-long", "clm-short", "mlm-long", "mlm-short"]
        assert set(family["picks"]["random"]) == {"lr", "edge"}
    stripped = {k: v for k, v in json.loads((tmp_path / "probe.json").read_text()).items() if k != "reported"}
    (tmp_path / "old.json").write_text(json.dumps(stripped))  # a probe written before `reported`: --render adds it
    assert probe.main(["--render", str(tmp_path / "old.json")]) == 0
    assert json.loads((tmp_path / "old.json").read_text())["reported"] == json.loads(json.dumps(reported))
