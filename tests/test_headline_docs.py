"""docs/headline.md against what it quotes (issue 71): the design-cpu table is the committed JSON rendered row for row,
with each verdict's detectable difference and power; each number of the lead and the statistics section is computed
here from the JSON, the paper's figures or the simulation; withdrawn and stale lines stay gone."""

import json
import re
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import headline_design as design  # noqa: E402
import headline_stats as hs  # noqa: E402

from hf_encoderize.evaluation.stats import paired_t  # noqa: E402

RESULTS = ROOT / "examples" / "headline" / "results"
DOCS = (ROOT / "docs" / "headline.md").read_text()
FLAT = " ".join(DOCS.split())


@pytest.fixture(scope="module")
def report():
    return json.loads((RESULTS / "design-cpu.json").read_text())


def test_the_table_is_the_json_rendered_row_for_row_with_power_beside_every_verdict(report):
    lines = [design.render_row(row) for row in report["rows"]]
    start = DOCS.index(design.TABLE_HEAD)
    table = DOCS[start:].split("\n\n")[0].splitlines()[2:]
    assert table == lines
    for row, line in zip(report["rows"], lines, strict=True):  # a detectable difference each row, a power each verdict
        assert re.search(r"\| ±\d+\.\d \| " + (r"\d+\.\d%" if row["predicted"] else "-") + " ", line), line


def test_the_leads_power_figures_are_the_tables(report):
    cells = [design.power_cells(row) for row in report["rows"]]
    smallest = [float(c[0].lstrip("±")) for c in cells]
    assert f"is {min(smallest):.1f}-{max(smallest):.1f} points" in FLAT
    scored = [(row, c) for row, c in zip(report["rows"], cells, strict=True) if row["predicted"]]
    directional = [float(c[1].split("%")[0]) for row, c in scored if row["predicted"] != "~" and row["family"] != "qa"]
    assert f"power is {round(min(directional))}-{round(max(directional))}%" in FLAT
    tost = [float(c[1].split("%")[0]) for row, c in scored if row["predicted"] == "~"]
    assert f"only {round(min(tost))}-{round(max(tost))}% of the time" in FLAT
    effects = [abs(a - b) for length in design.PAPER.values() for f, (a, b) in length.items() if f != "qa"]
    assert f"paper's effects of {min(effects):.1f}-{max(effects):.1f} on SC, TC and IR" in FLAT


def test_the_grid_edge_and_the_random_init_floor_are_in_the_lead(report):
    sides = [row[arm] for row in report["rows"] for arm in ("clm", "mlm")]
    top = sum(side["lr"] == max(design.PRESETS["design-cpu"]["ft_lrs"]) for side in sides)
    lead = FLAT[:FLAT.index("## Predictions")]
    assert f"{top} of the {len(sides)} learning-rate picks are the grid's top rate" in lead
    assert (top, len(sides)) == (19, 24) and "no random-init control was fine-tuned" in lead


def test_the_held_out_loss_comparison_is_on_one_document_set_and_the_crossed_one_is_withdrawn():
    losses = json.loads((RESULTS / "design-cpu-facts.json").read_text())["losses"]
    gaps = [losses[f"clm-order{o}"]["clm-cpt360"] - losses[f"mlm-order{o}"]["mlm-cpt360"] for o in range(4)]
    t = paired_t(gaps)
    assert f"({statistics.fmean(gaps):.2f} nats, 95% CI [{t['low']:.2f}, {t['high']:.2f}])" in FLAT
    assert "120 steps made the MLM base's loss worse" not in FLAT and "base -> after CPT: order" not in FLAT
    assert FLAT.count("**Withdrawn:**") == 2


def test_the_statistics_section_states_each_rate_with_its_monte_carlo_interval():
    rows = [line for line in DOCS.splitlines() if re.match(r"\| [a-z].* \| (seeds|data orders) \| ", line)]
    assert len(rows) == 8
    for line in rows:
        cell = re.search(r"\| ([\d.]+)% \[([\d.]+)%, ([\d.]+)%\] \|", line)
        rate, low, high = cell.groups()
        found = hs.rate_interval(round(float(rate) * 10), 1000)
        assert (f"{found[0]:.1%}", f"{found[1]:.1%}") == (f"{low}%", f"{high}%"), line
    assert "[3.4%, 6.1%]" in FLAT and "not one at or under it" in FLAT
    assert f"(+{hs.effect_points(hs.POWER[0]):.1f} points on average" in FLAT and "~14 points" not in FLAT


def test_stale_lines_are_gone():
    assert "per order and per seed" not in FLAT and "at most ~9 min" not in FLAT and "0.2-1 point" not in FLAT
    readme = (ROOT / "examples" / "headline" / "README.md").read_text()
    assert "~10 min on one H100" not in readme
    module = (ROOT / "benchmarks" / "headline_design.py").read_text()
    assert "~1 h, 2 cores" not in module and "1 h 47 min" in module and "7.6 s a fine-tuning run" in module


def test_the_paper_effects_are_the_registered_tables_figures():
    registered = (ROOT / "examples" / "headline" / "predictions_design.md").read_text()
    for family, short, long in (("SC", "sc", "sc"), ("TC", "tc", "tc"), ("QA", "qa", "qa"), ("IR", "ir", "ir")):
        row = next(line for line in registered.splitlines() if line.startswith(f"| {family} |"))
        figures = [float(x) for x in re.findall(r"(\d+\.\d+) vs (\d+\.\d+)", row) for x in x]
        assert figures == [*design.PAPER["short"][short], *design.PAPER["long"][long]]


def test_the_smoke_design_says_so_and_the_probe_is_reported_as_it_ran():
    """The probe's table is its committed JSON rendered row for row (the detectable shrink and the power beside each
    verdict); its verdict, scored as registered, heads its section; no line still calls it not run."""
    import headline_probe as probe

    result = {"budget": "design-tiny", "rows": [], "orders_analysed": [0, 1], "base_tokens_per_parameter": 0.1}
    assert design.render(result).startswith("**design-tiny: a smoke test of the chain.")
    ran = json.loads((RESULTS / "probe-cpu.json").read_text())
    assert ran["budget"] == "probe-cpu" and ran["orders"] == [0, 1, 2, 3]
    section = DOCS[DOCS.index("### A registered probe"):].split("\n## ")[0]
    table = probe.render(ran).split("\n\n", 1)[1]
    assert table in section
    for row in ran["families"].values():
        assert row["scored"] == probe.score_shrink(row["gaps"]["short"], row["gaps"]["long"])["scored"]
    assert f"The probe's verdict: **{ran['verdict']}**" in " ".join(section.split())
    assert "not yet run" not in FLAT.lower() and "not run yet" not in FLAT.lower()
    for orders in ("0,1", "2,3"):
        assert f"--threads 1 --orders {orders}" in section
    assert "python benchmarks/headline_probe.py --budget probe-cpu --out runs/probe --threads 1" in section
