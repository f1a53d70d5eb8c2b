"""A .txt corpus is read as documents, not lines (issue 40 point 2): `--text-unit line|paragraph|file`, paragraphs by
default, recorded in the run record and on the card, and one warning line before training when the median document
is under an eighth of --max-seq-length."""

import json

import pytest
from conftest import make_tokenizer

from hf_encoderize.cli import main
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.data.budget import check_document_length, check_token_budget
from hf_encoderize.data.sources import DataConfig, open_documents


def write_prose(path, paragraphs: int, lines: int = 4, words: int = 6):
    """Wrapped prose: `paragraphs` paragraphs of `lines` lines of `words` words, an empty line between paragraphs."""
    text = "\n\n".join("\n".join(" ".join(f"w{(p * 7 + row * words + w) % 60}" for w in range(words))
                                 for row in range(lines)) for p in range(paragraphs))
    path.write_text(text + "\n")
    return path


@pytest.mark.parametrize("unit, documents, words", [
    ("paragraph", 12, 24),  # the default: four wrapped lines make one document
    ("line", 48, 6),
    ("file", 1, 12 * 24),
])
def test_a_txt_file_is_cut_by_its_text_unit(tmp_path, unit, documents, words):
    corpus = write_prose(tmp_path / "prose.txt", 12)
    cfg = DataConfig(data_files=str(corpus), text_unit=unit, eval_documents=0)
    read = list(open_documents(cfg))
    assert len(read) == documents
    assert {len(text.split()) for text in read} == {words}


def test_paragraphs_are_the_default():
    assert DataConfig().text_unit == "paragraph"


def test_an_unknown_text_unit_is_one_error_line(tmp_path, capsys):
    with pytest.raises(EncoderizeError, match="--text-unit must be one of line, paragraph, file"):
        DataConfig(text_unit="sentence")
    corpus = write_prose(tmp_path / "prose.txt", 12)
    with pytest.raises(SystemExit) as refused:  # the Literal's values are the flag's choices: argparse refuses it
        main(["cpt", "some/model", "--data-files", str(corpus), "--text-unit", "sentence",
              "--output-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert refused.value.code == 2 and err.startswith("error: argument --text-unit: invalid choice: 'sentence'")
    assert len(err.strip().splitlines()) == 1, err


def test_the_help_says_what_a_document_is(capsys):
    with pytest.raises(SystemExit):
        main(["cpt", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "--text-unit" in out and "paragraph" in out and "(default: paragraph)" in out


def test_short_documents_are_said_once_with_what_to_do(tmp_path):
    corpus = write_prose(tmp_path / "prose.txt", 40)
    tokenizer, lines = make_tokenizer(), []
    by_line = DataConfig(data_files=str(corpus), text_unit="line", seq_len=64, eval_documents=4)
    assert check_document_length(by_line, open_documents(by_line), tokenizer, say=lines.append) == 6
    assert len(lines) == 1 and lines[0].startswith("warning: the median training document is 6 tokens"), lines
    assert "--max-seq-length 64" in lines[0] and "--text-unit paragraph" in lines[0]
    lines.clear()
    by_paragraph = DataConfig(data_files=str(corpus), seq_len=64, eval_documents=4)  # 24 tokens: over 64 / 8
    assert check_document_length(by_paragraph, open_documents(by_paragraph), tokenizer, say=lines.append) == 24
    assert lines == []


def test_the_budget_line_of_a_local_run_does_not_advise_a_hub_subset(tmp_path):
    corpus = write_prose(tmp_path / "prose.txt", 20)
    cfg = DataConfig(data_files=str(corpus), seq_len=16, eval_documents=0)
    lines = []
    check_token_budget(cfg, open_documents(cfg), make_tokenizer(), rows_per_step=8, steps=100, say=lines.append)
    assert len(lines) == 1 and "--dataset-config" not in lines[0] and "--data-files" in lines[0], lines


def test_cpt_records_the_unit_and_warns_before_the_first_step(decoder_dir, tmp_path, capsys):
    corpus = write_prose(tmp_path / "prose.txt", 30)
    out = tmp_path / "run"
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--text-unit", "line", "--output-dir", str(out),
                 "--max-seq-length", "64", "--max-steps", "2", "--batch-size", "2", "--eval-documents", "4",
                 "--eval-steps", "0",
                 "--save-steps", "1000"])
    err = capsys.readouterr().err
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning: the median training document")]
    assert len(warnings) == 1, err
    data = json.loads((out / "run_record.json").read_text())["data"]
    assert data["text_unit"] == "line" and data["data_files"] == str(corpus)
    assert data["dataset"] is None and data["dataset_config"] is None  # the Hub default it never read
    assert main(["card", str(out)]) == 0
    card = (out / "encoder" / "README.md").read_text()
    assert "(one document per line)" in card and "fineweb" not in card.lower()


def test_a_txt_run_recorded_before_text_units_resumes_only_by_lines(decoder_dir, tmp_path, capsys):
    """A run recorded before --text-unit read its .txt files one line per document; resuming it under today's default
    (paragraphs) would continue the stream's position in other documents. It is refused in one line, and resumes
    with --text-unit line."""
    corpus = write_prose(tmp_path / "prose.txt", 30)
    out = tmp_path / "run"
    argv = ["cpt", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(out), "--max-seq-length", "32",
            "--max-steps", "2", "--batch-size", "2", "--eval-documents", "4", "--eval-steps", "0", "--save-steps", "1",
            "--no-progress"]
    assert main([*argv, "--text-unit", "line"]) == 0
    settings = json.loads((out / "run_settings.json").read_text())
    del settings["identity"]["data.text_unit"]  # as a run recorded before the option existed,
    settings["identity"]["data.data_files"] = str(corpus)  # which named its files by path
    (out / "run_settings.json").write_text(json.dumps(settings))
    capsys.readouterr()
    assert main([*argv, "--resume"]) == 2
    err = capsys.readouterr().err
    assert "data.text_unit was 'line', now 'paragraph'" in err and "Traceback" not in err, err
    assert main([*argv, "--resume", "--text-unit", "line"]) == 0
