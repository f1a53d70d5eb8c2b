"""The headline's GPU pilot fits its machine (issue 65, point 5): its carry is the texts gzipped once plus each order's
tokenizer and config, under the 64 MiB a GPU machine receives, each order's split re-made there and checked; and its
deadline stops a base or a CPT under way at a step boundary, recorded as PARTIAL, where it used to be read only
between fine-tuning runs."""

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
MIB = 1024 * 1024


def _load(name: str):
    sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class StepClock:
    """A clock for the deadline alone: each reading is one later (so the deadline falls between known steps)."""

    def __init__(self):
        self.now = -1

    def time(self) -> float:
        self.now += 1
        return float(self.now)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    design = _load("headline_design")
    out = tmp_path_factory.mktemp("pilot")
    assert design.run("design-tiny", out, threads=1, prepare_only=True) is None
    return design, out


def test_prepare_only_leaves_a_compact_carry_and_the_split_is_re_made_where_training_runs(prepared):
    design, out = prepared
    corpus = _load("headline_corpus")
    assert (out / corpus.TEXTS).is_file() and not list(out.glob("order*/*.jsonl"))  # no split travels
    for order in (0, 1):
        work = design.hl.prepare_order(out, design.PRESETS["design-tiny"], order)  # on the GPU machine
        recorded = json.loads((work / "corpus.json").read_text())["sha256"]
        assert {name: corpus.hashlib.sha256((work / f"{name}.jsonl").read_bytes()).hexdigest()
                for name in corpus.SPLITS} == recorded
    corpus.compact(out)
    texts = corpus.read_texts(out / corpus.TEXTS)
    corpus.write_texts(out / corpus.TEXTS, texts[1:])  # other texts than the tokenizers were trained on
    with pytest.raises(SystemExit, match="differs from the one prepared"):
        design.hl.prepare_order(out, design.PRESETS["design-tiny"], 0)
    corpus.write_texts(out / corpus.TEXTS, texts)


def test_the_deadline_stops_a_training_phase_at_a_step_boundary_and_records_it_partial(prepared, monkeypatch):
    design, out = prepared
    hd = design.hd
    from hf_encoderize.training.engine import loop

    step_function = loop.train_step
    work = design.hl.prepare_order(out, design.PRESETS["design-tiny"], 0)
    monkeypatch.setattr(hd, "time", StepClock())  # readings 0, 1, 2, 3: steps 1-3 start, the 4th does not
    built = design.design_arm(work, "clm", design.PRESETS["design-tiny"], 0, deadline=3.0)
    partial = built["partial"]
    assert partial["model"] == "clm-base" and partial["status"].startswith("PARTIAL")
    assert (partial["steps_done"], partial["steps_planned"]) == (3, 6)
    assert built["encoders"] == {} and not (work / "clm-base" / "encoder").exists()  # no model passes as finished
    assert loop.train_step is step_function  # the loop's own step function is back
    facts = {"stopped_at_deadline": {**partial, "order": 0}}
    result = design.report(out, "design-tiny", facts)  # no order finished: the facts are still written
    assert result["rows"] == [] and result["orders_analysed"] == []
    assert "Stopped at the deadline" in (out / "design.md").read_text() and "PARTIAL" in (out / "design.md").read_text()


def test_a_finished_cpt_records_the_bases_loss_on_the_cpts_documents(prepared):
    design, out = prepared
    work = design.hl.prepare_order(out, design.PRESETS["design-tiny"], 1)
    built = design.design_arm(work, "mlm", design.PRESETS["design-tiny"], 1)
    assert built["partial"] is None and sorted(built["encoders"]) == ["mlm-base", "mlm-cpt2", "mlm-cpt4"]
    same_documents = built["base_on_cpt_documents"]
    assert sorted(same_documents) == ["mlm-cpt2", "mlm-cpt4"]
    assert all(value > 0 for value in same_documents.values())
    assert same_documents["mlm-cpt2"] == pytest.approx(same_documents["mlm-cpt4"])  # one base, one document set


@pytest.mark.slow
def test_the_gpu_pilots_carry_is_under_64_mib(tmp_path):
    """The gpu-pilot's real texts (12M tokens' worth, read from this machine's packages: minutes) gzipped, plus four
    8k BPEs and configs, against the 64 MiB a GPU machine receives; the split files no longer carried were ~180 MB."""
    design, corpus = _load("headline_design"), _load("headline_corpus")
    from biphasic_small import train_tokenizer

    p = design.PRESETS["gpu-pilot"]
    texts = corpus.collect_texts(p["corpus_tokens"])
    corpus.write_texts(tmp_path / corpus.TEXTS, texts)
    sample = tmp_path / "sample.jsonl"
    sample.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts[:2000]))
    train_tokenizer(sample, tmp_path / "tokenizer", p["vocab"])
    design.hl.write_model_config(tmp_path / "config.json", p, p["vocab"])
    per_order = corpus.folder_bytes(tmp_path / "tokenizer") + (tmp_path / "config.json").stat().st_size + 1024
    carry = (tmp_path / corpus.TEXTS).stat().st_size + len(p["orders"]) * per_order
    uncompressed = len(gzip.decompress((tmp_path / corpus.TEXTS).read_bytes()))
    assert uncompressed * len(p["orders"]) > 150e6  # what carrying each order's split would have cost
    assert carry < 64 * MIB, f"{carry / MIB:.1f} MiB"


def _wheel(folder: Path) -> Path:
    """A minimal pure-Python wheel (one module), enough for pip's --no-index --target install."""
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pilotprobe-0.1-py3-none-any.whl"
    files = {"pilotprobe.py": "VALUE = 42\n",
             "pilotprobe-0.1.dist-info/METADATA": "Metadata-Version: 2.1\nName: pilotprobe\nVersion: 0.1\n",
             "pilotprobe-0.1.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                                               "Tag: py3-none-any\n"}
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in files.items():
            archive.writestr(name, text)
        archive.writestr("pilotprobe-0.1.dist-info/RECORD", "".join(f"{name},,\n" for name in files)
                         + "pilotprobe-0.1.dist-info/RECORD,,\n")
    return path


def test_wheels_install_the_way_the_gpu_session_does_and_a_bad_folder_is_one_error_line(tmp_path, monkeypatch):
    design = _load("headline_design")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "")
    said = design.install_wheels(str(_wheel(tmp_path / "wheels").parent), tmp_path / "gpu")
    assert "installed 1" in said and (tmp_path / "gpu" / "site" / "pilotprobe.py").is_file()
    with pytest.raises(SystemExit, match=r"^error: --wheels .*no \.whl files"):
        design.install_wheels(str(tmp_path / "empty"), tmp_path / "gpu2")
