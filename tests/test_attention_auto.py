"""`--attn-implementation auto` (the default): the fastest backend the architecture supports on this machine, recorded
in the saved config and the run record; an explicit backend the architecture lacks is one line, not a load error."""

import json

import pytest
from conftest import make_decoder, make_tokenizer

from hf_encoderize.cli import main
from hf_encoderize.loading import LoadConfig, backend_candidates, choose_backend


@pytest.fixture(scope="module")
def gptj_dir(tmp_path_factory):
    """A tiny GPT-J: its transformers class has no sdpa (nor flex) kernel."""
    path = tmp_path_factory.mktemp("models") / "tiny-gptj"
    make_decoder("gptj", "eager", n_embd=32, n_layer=2, n_head=4, rotary_dim=4, n_positions=64).save_pretrained(path)
    make_tokenizer().save_pretrained(path)
    return path


def test_auto_is_the_default_and_cpu_candidates_are_sdpa_then_eager():
    assert LoadConfig("x").attn_implementation == "auto"
    assert backend_candidates() == ["sdpa", "eager"]  # CPU: flex measured slower, flash needs a GPU


@pytest.mark.parametrize(("model_type", "expected"), [("llama", "sdpa"), ("gptj", "eager"), ("bloom", "eager")])
def test_auto_picks_the_fastest_supported(model_type, expected):
    from transformers import AutoConfig

    assert choose_backend(AutoConfig.for_model(model_type), "auto") == expected


def test_convert_by_default_works_on_a_model_without_sdpa(gptj_dir, tmp_path):
    out = tmp_path / "encoder"
    assert main(["convert", str(gptj_dir), str(out)]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["is_causal"] is False and config["hf_encoderize"]["attn_implementation"] == "eager"


def test_an_explicit_backend_the_architecture_lacks_is_one_line(gptj_dir, tmp_path, capsys):
    code = main(["convert", str(gptj_dir), str(tmp_path / "out"), "--attn-implementation", "sdpa"])
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err
    assert "does not support --attn-implementation sdpa" in errors[0] and "auto" in errors[0]
    assert "not a local model folder" not in err
    assert not (tmp_path / "out").exists()
