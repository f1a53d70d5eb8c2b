"""`contrastive` reads local files through the one reader cpt uses (`corpus_files.local_files`): a folder, `~` and a
file name with brackets work in both, and a bad JSON line is named by file and line (issue 28 step 1, issue 30)."""

import json

import pytest

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.data.sources import DataConfig, load_documents
from hf_encoderize.recipes.contrastive import ContrastiveConfig, load_rows

PAIRS = [{"anchor": f"question {i}", "positive": f"answer {i}"} for i in range(4)]


def _jsonl(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _contrastive(spec: str) -> list[dict]:
    config = ContrastiveConfig("no-such-encoder", data_files=spec, method="supervised", lead_token=False)
    return list(load_rows(config))


SPECS = {  # id: (files to write under the temporary folder, the --data-files given, relative to it)
    "a folder": ({"data/a.jsonl": PAIRS[:2], "data/sub/b.jsonl": PAIRS[2:]}, "data"),
    "brackets in the name": ({"pairs[1].jsonl": PAIRS}, "pairs[1].jsonl"),
    "a glob": ({"x/p1.jsonl": PAIRS[:2], "x/p2.jsonl": PAIRS[2:]}, "x/p*.jsonl"),
}


@pytest.mark.parametrize("case", list(SPECS))
def test_contrastive_reads_what_cpt_reads(case, tmp_path):
    files, spec = SPECS[case]
    for name, rows in files.items():
        _jsonl(tmp_path / name, rows)
    got = _contrastive(str(tmp_path / spec))
    assert sorted(row["anchor"] for row in got) == sorted(row["anchor"] for row in PAIRS)
    source, _ = load_documents(DataConfig(data_files=str(tmp_path / spec), text_column="anchor"))
    assert sorted(row["anchor"] for row in source) == sorted(row["anchor"] for row in PAIRS)


def test_contrastive_expands_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    _jsonl(tmp_path / "pairs.jsonl", PAIRS)
    assert len(_contrastive("~/pairs.jsonl")) == len(PAIRS)


def test_a_bad_json_line_is_named_by_file_and_line(tmp_path):
    path = _jsonl(tmp_path / "pairs.jsonl", PAIRS)
    path.write_text(path.read_text() + '{"anchor": "cut off\n')
    with pytest.raises(EncoderizeError, match=rf"{path} line 5: not valid JSON"):
        _contrastive(str(path))


def test_csv_keeps_contrastives_columns(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text("anchor,positive\n" + "".join(f"{r['anchor']},{r['positive']}\n" for r in PAIRS))
    assert [row["positive"] for row in _contrastive(str(path))] == [row["positive"] for row in PAIRS]
