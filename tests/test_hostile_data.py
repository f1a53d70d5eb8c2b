"""Issue 14, two classes of bad input: every case is one `error:` line, exit code 2, no traceback, and the user's
output folder untouched.

1. Data contents given to `cpt --data-files` (invalid JSON, binary files, non-text values, fake parquet, ...).
2. Weights on disk: a local model folder with a corrupt or missing config, weights or tokenizer (`convert`, `cpt`).
"""

import json
import shutil
from pathlib import Path

import pytest
from conftest import write_corpus

from hf_encoderize.cli import main

CPT_ARGS = ["--max-seq-length", "16", "--max-steps", "2", "--batch-size", "2", "--eval-documents", "2",
            "--eval-steps", "0",
            "--no-progress"]


def _jsonl(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def _good(n: int = 40) -> list[dict]:
    return [{"text": f"w{i % 50} w{i % 50 + 1} w{i % 50 + 2} w3 w4 w5"} for i in range(n)]


def _user_folder(tmp_path, run_file: str):
    """An earlier run of ours the user already has (one file in it, and our marker, so --overwrite may replace it):
    a run refused for its data must leave it byte for byte."""
    from hf_encoderize.common.outputs import write_marker

    out = tmp_path / "user-out"
    out.mkdir()
    (out / run_file).write_bytes(b'{"step": 1, "loss": 2.5}\n')
    write_marker(out, "cpt")
    return out


def _snapshot(folder) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _assert_one_line_error(code: int, err: str, expected: str, strict: bool = True) -> None:
    lines = err.strip().splitlines() if strict else [line for line in err.splitlines() if "error" in line.lower()]
    assert code == 2, err
    assert "Traceback" not in err, err
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert expected in lines[0], err


# ------------------------------------------------------------------------------------------- 1. data contents


def _invalid_json_line(tmp_path):
    rows = _good()
    rows[2] = '{"text": "w1 w2'
    return _jsonl(tmp_path / "docs.jsonl", rows), "docs.jsonl line 3: not valid JSON"


def _invalid_json_late(tmp_path):
    rows = _good(200)
    rows[150] = "not json at all"
    return _jsonl(tmp_path / "docs.jsonl", rows), "docs.jsonl line 151: not valid JSON"


def _binary_as_txt(tmp_path):
    path = tmp_path / "docs.txt"
    path.write_bytes(bytes(range(256)) * 40)
    return str(path), "docs.txt line 2: not UTF-8 text"


def _binary_as_jsonl(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(128, 256)) * 30)
    return str(path), "docs.jsonl line 1: not UTF-8 text"


def _null_text(tmp_path):
    rows = _good()
    rows[1] = {"text": None}
    return _jsonl(tmp_path / "docs.jsonl", rows), "docs.jsonl row 2: column 'text' holds null, not text"


def _number_text(tmp_path):
    rows = [{"text": i} for i in range(40)]
    return _jsonl(tmp_path / "docs.jsonl", rows), "docs.jsonl row 1: column 'text' holds int, not text"


def _list_text(tmp_path):
    rows = [{"text": ["w1", "w2"]} for _ in range(40)]
    return _jsonl(tmp_path / "docs.jsonl", rows), "docs.jsonl row 1: column 'text' holds list, not text"


def _late_null_text(tmp_path):
    rows = _good(300)
    rows[250] = {"text": None}
    return _jsonl(tmp_path / "docs.jsonl", rows), "docs.jsonl row 251: column 'text' holds null, not text"


def _fake_parquet(tmp_path):
    path = tmp_path / "docs.parquet"
    path.write_text("this is not parquet\n" * 10)
    return str(path), "docs.parquet: not a parquet file"


def _json_array_not_objects(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text("[1, 2, 3]\n" * 10)
    return str(path), "docs.jsonl line 1: a JSON list, not an object"


def _only_empty_documents(tmp_path):
    return _jsonl(tmp_path / "docs.jsonl", [{"text": ""}] * 10), "no training documents after the 2 held out"


def _second_file_bad(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    _jsonl(folder / "a.jsonl", _good())
    rows = _good()
    rows[4] = "{oops"
    _jsonl(folder / "b.jsonl", rows)
    return str(folder), "b.jsonl line 5: not valid JSON"


DATA_CASES = {
    "invalid JSON line": _invalid_json_line,
    "invalid JSON far down": _invalid_json_late,
    "binary file as .txt": _binary_as_txt,
    "binary file as .jsonl": _binary_as_jsonl,
    "null text": _null_text,
    "number text": _number_text,
    "list text": _list_text,
    "null text far down": _late_null_text,
    "not parquet": _fake_parquet,
    "JSON lines that are not objects": _json_array_not_objects,
    "only empty documents": _only_empty_documents,
    "bad line in the second file": _second_file_bad,
}


@pytest.mark.parametrize("case", DATA_CASES)
def test_bad_data_contents_are_one_line(case, decoder_dir, tmp_path, capsys):
    data_files, expected = DATA_CASES[case](tmp_path)
    out = _user_folder(tmp_path, "metrics.jsonl")
    before = _snapshot(out)
    code = main(["cpt", str(decoder_dir), "--data-files", data_files, "--output-dir", str(out), "--overwrite",
                 *CPT_ARGS])
    _assert_one_line_error(code, capsys.readouterr().err, expected)
    assert _snapshot(out) == before


def test_bad_row_found_mid_stream_is_one_line(decoder_dir, tmp_path, capsys, monkeypatch):
    """A source too large to check up front: the bad row surfaces during training, still as one line."""
    import hf_encoderize.data.sources as data

    monkeypatch.setattr(data, "PRECHECK_BYTES", 0)
    rows = _good(300)
    rows[60] = {"text": 7}
    data_files = _jsonl(tmp_path / "docs.jsonl", rows)
    code = main(["cpt", str(decoder_dir), "--data-files", data_files, "--output-dir", str(tmp_path / "run"),
                 *CPT_ARGS[:2], "--max-steps", "40", *CPT_ARGS[4:]])
    # Loading the model printed progress bars before training started; the failure itself is one line.
    _assert_one_line_error(code, capsys.readouterr().err, "docs.jsonl row 61: column 'text' holds int, not text",
                           strict=False)


def test_empty_documents_are_skipped(tmp_path):
    from hf_encoderize.data.sources import DataConfig, open_documents

    rows = [{"text": ""}, {"text": "w1 w2"}, {"text": "   "}, {"text": "w3"}]
    config = DataConfig(data_files=_jsonl(tmp_path / "docs.jsonl", rows), eval_documents=1)
    assert list(open_documents(config)) == ["w1 w2", "w3"]


# ---------------------------------------------------------------------------------------------- 2. weights on disk


def _truncate(folder, name, keep=0.5):
    data = (folder / name).read_bytes()
    (folder / name).write_bytes(data[: int(len(data) * keep)])


def _corrupt_config(folder):
    (folder / "config.json").write_text('{"model_type": "llama", "hidden_size": 32,')


WEIGHT_CASES = {
    "truncated safetensors": (lambda f: _truncate(f, "model.safetensors"), "corrupt weights (file model.safetensors"),
    "safetensors header only": (lambda f: _truncate(f, "model.safetensors", 0.001),
                                "corrupt weights (file model.safetensors"),
    "garbage safetensors": (lambda f: (f / "model.safetensors").write_bytes(b"\x00garbage" * 100),
                            "corrupt weights (file model.safetensors"),
    "no weights": (lambda f: (f / "model.safetensors").unlink(), "no weights file"),
    "invalid config.json": (_corrupt_config, "corrupt config.json"),
    "config.json not an object": (lambda f: (f / "config.json").write_text("[1, 2]"), "corrupt config.json"),
    "missing config.json": (lambda f: (f / "config.json").unlink(), "no config.json"),
    "corrupt tokenizer.json": (lambda f: _truncate(f, "tokenizer.json"), "corrupt tokenizer file (tokenizer.json"),
    "corrupt tokenizer_config.json": (lambda f: (f / "tokenizer_config.json").write_text("{not json"),
                                      "corrupt tokenizer file (tokenizer_config.json"),
    "no tokenizer files": (lambda f: [(f / n).unlink() for n in ("tokenizer.json", "tokenizer_config.json")
                                      if (f / n).exists()], "no tokenizer files"),
    "folder does not exist": (lambda f: shutil.rmtree(f), "not found"),
}


@pytest.mark.parametrize("command", ["convert", "cpt"])
@pytest.mark.parametrize("case", WEIGHT_CASES)
def test_bad_weights_on_disk_are_one_line(case, command, decoder_dir, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(decoder_dir, model)
    corrupt, expected = WEIGHT_CASES[case]
    corrupt(model)
    out = _user_folder(tmp_path, "notes.txt" if command == "convert" else "metrics.jsonl")
    before = _snapshot(out)
    argv = ["convert", str(model), str(out), "--overwrite"]
    if command == "cpt":
        argv = ["cpt", str(model), "--output-dir", str(out), "--overwrite"]
        argv += ["--data-files", str(write_corpus(tmp_path / "docs.jsonl", 40, lambda i: 6)), *CPT_ARGS]
    code = main(argv)
    err = capsys.readouterr().err
    _assert_one_line_error(code, err, expected)
    assert "not a reachable Hub model id" not in err
    assert _snapshot(out) == before


def _rewrite_first_line(path: Path, change) -> None:
    lines = path.read_text().splitlines()
    lines[0] = change(lines[0])
    path.write_text("\n".join(lines) + "\n")


EVAL_FIXTURES = Path(__file__).parent / "fixtures" / "eval"
EVAL_DATA_CASES = {  # dataset, file, how the first line is spoiled, the message
    "sst2: a renamed column": ("sst2", "train.jsonl", lambda line: line.replace('"sentence"', '"text"'),
                               "not in the Hub schema"),
    "sst2: a line that is not JSON": ("sst2", "train.jsonl", lambda line: line[:-5], "line 1: not valid JSON"),
    "sst2: a JSON list for a row": ("sst2", "validation.jsonl", lambda line: "[1, 2]", "not an object"),
    "sst2: a label that is text": ("sst2", "train.jsonl", lambda line: line.replace('"label": 1', '"label": "good"'),
                                   "train split, row 0: not in the Hub schema"),
    "squad: no answers column": ("squad", "train.jsonl", lambda line: line.replace('"answers"', '"answer"'),
                                 "not in the Hub schema"),
}


@pytest.mark.parametrize("case", list(EVAL_DATA_CASES))
def test_eval_data_with_the_wrong_schema_is_one_line(case, decoder_dir, tmp_path, capsys):
    """`eval --data-dir` files that are not in the Hub schema: one line naming the dataset, split and row (or the file
    and line), exit 2, no traceback, the user's results folder unchanged."""
    name, file, spoil, message = EVAL_DATA_CASES[case]
    data = tmp_path / "data"
    shutil.copytree(EVAL_FIXTURES, data)
    _rewrite_first_line(data / name / file, spoil)
    results = tmp_path / "results"
    results.mkdir()
    (results / "mine.txt").write_text("keep me")
    code = main(["eval", str(decoder_dir), "--profile", "quick", "--datasets", name, "--data-dir", str(data),
                 "--output-dir", str(results), "--max-steps", "2", "--batch-size", "4", "--max-seq-length", "32"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and message in errors[0] and "Traceback" not in err, err
    assert sorted(p.name for p in results.rglob("*")) == ["mine.txt"]
    assert (results / "mine.txt").read_text() == "keep me"
