"""Quiet by default (issue 40, point 5): progress through `logging` on stderr (stdout holds the result), `-q` keeps only
warnings and errors, the libraries' INFO lines only with `-v`."""

import dataclasses
import json
import logging

import pytest

from hf_encoderize import cli


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": " ".join(f"w{(7 * d + i) % 120}" for i in range(6 + d % 20))}) + "\n"
                            for d in range(80)))
    return path


def test_progress_on_stderr_the_summary_on_stdout_and_q_keeps_it_quiet(decoder_dir, corpus, tmp_path, capsys):
    argv = ["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "2", "--max-seq-length", "32",
            "--batch-size", "4", "--eval-documents", "8", "--eval-steps", "0", "--save-steps", "100", "--no-progress",
            "--logging-steps", "1"]
    assert cli.main([*argv, "--output-dir", str(tmp_path / "a")]) == 0
    out, err = capsys.readouterr()
    assert "step 1/2 loss" in err and "step 2/2 loss" in err  # progress: the log, on stderr
    (summary,) = out.splitlines()  # stdout: the result alone, so it can be piped
    assert json.loads(summary)["steps"] == 2
    assert cli.main(["-q", *argv, "--output-dir", str(tmp_path / "b")]) == 0
    out, err = capsys.readouterr()
    assert "step 1/2" not in err and json.loads(out)["steps"] == 2


def _doctor_runs(function, monkeypatch) -> None:
    """`hf-encoderize doctor` runs `function` instead: the CLI's logging set-up around a body that logs."""
    monkeypatch.setitem(cli.COMMANDS, "doctor", dataclasses.replace(cli.COMMANDS["doctor"], function=function))


def test_library_info_lines_only_with_verbose(monkeypatch, capsys):
    from transformers.utils import logging as transformers_logging

    levels = []

    def chatter(*configs):  # what ONNX Runtime's quantizer (the root logger), transformers and datasets say
        logging.info("quantizer chatter")
        levels.append(transformers_logging.get_verbosity())  # transformers writes through its own handler
        logging.getLogger("datasets.builder").info("datasets chatter")
        logging.getLogger("hf_encoderize.somewhere").info("our progress")
        logging.getLogger("hf_encoderize.somewhere").debug("our debug line")
        return "result"

    _doctor_runs(chatter, monkeypatch)
    assert cli.main(["doctor"]) == 0
    out, err = capsys.readouterr()
    assert out == "result" and err.splitlines() == ["our progress"]
    assert cli.main(["-v", "doctor"]) == 0
    err = capsys.readouterr().err
    assert all(line in err for line in ("quantizer chatter", "datasets chatter", "our progress", "our debug line"))
    assert cli.main(["doctor", "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert levels == [logging.ERROR, logging.INFO, logging.ERROR]  # a library's warning, too, only with -v


def test_a_saved_encoder_loads_without_a_load_report_in_a_clean_client(tmp_path):
    """An untied MLM head is saved in lm_head.safetensors: a plain `AutoModel.from_pretrained` (the backbone) finds no
    unexpected key, so transformers prints no LOAD REPORT table, and the loaders that want the head still get it."""
    import subprocess
    import sys
    from pathlib import Path

    import torch
    from conftest import make_decoder, make_tokenizer
    from transformers import AutoModelForMaskedLM

    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.loading import LoadConfig, load_decoder
    from hf_encoderize.model.saving import save_encoder

    model, tokenizer = make_decoder("llama", tie_word_embeddings=False), make_tokenizer()
    encoderize(model, tokenizer)
    out = save_encoder(model, tokenizer, tmp_path / "encoder")
    check = Path(__file__).with_name("clean_env_check.py")  # hf_encoderize unimportable there
    done = subprocess.run([sys.executable, str(check), str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "LOAD REPORT" not in done.stderr and "UNEXPECTED" not in done.stderr and "MISSING" not in done.stderr
    assert report["automodel_class"] == "LlamaModel" and report["later_token_changes_first"] is True
    assert report["mlm_class"] == "EncoderForMaskedLM" and len(report["fill_mask"]) == 3
    head = model.lm_head.weight.detach().float()
    mlm = AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True)
    assert torch.equal(mlm.lm_head.weight.detach().float(), head)  # the shipped class reads the head file
    again, _ = load_decoder(LoadConfig(str(out)))  # a cpt that continues from the encoder trains the same head
    assert torch.equal(again.lm_head.weight.detach().float(), head)


def test_the_default_prompt_warning_of_our_own_models_is_shown_only_with_verbose(monkeypatch, capsys):
    """sentence-transformers 6 warns at every load that a model has a default prompt; every contrastive model has one
    (its lead tokens), so the quickstart printed it between its result lines. A library's warnings show with -v only,
    named after their library (issue 67: not our `warning:` prefix, so they do not read as ours)."""
    def load(*configs):
        logging.getLogger("sentence_transformers.base.model").warning("Default prompt name is set to 'text'. ...")
        logging.getLogger("sentence_transformers.base.model").warning("something else")
        return "result"

    _doctor_runs(load, monkeypatch)
    assert cli.main(["doctor"]) == 0
    assert capsys.readouterr().err == ""
    assert cli.main(["-v", "doctor"]) == 0
    assert capsys.readouterr().err.splitlines() == [
        "[sentence_transformers.base.model] warning: Default prompt name is set to 'text'. ...",
        "[sentence_transformers.base.model] warning: something else"]
