"""Loading any decoder, refusing what cannot be encoderized, and the CLI's one-line errors."""

import dataclasses
import re
import subprocess
import sys

import pytest

from hf_encoderize.cli import COMMANDS, main
from hf_encoderize.common import stages
from hf_encoderize.common.arguments import field_docs
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.options import flag, option_name
from hf_encoderize.model.loading import load_decoder


def _config_dir(tmp_path, config):
    path = tmp_path / config.model_type
    config.save_pretrained(path)
    return path


def _run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_load_local_folder(decoder_dir):
    model, tokenizer = load_decoder(str(decoder_dir))
    assert model.config.model_type == "llama" and tokenizer.eos_token == "</s>"


@pytest.mark.parametrize(
    "make_config, message",
    [
        (lambda: __import__("transformers").BertConfig(), "already an encoder"),
        (lambda: __import__("transformers").T5Config(), "encoder-decoder"),
        (lambda: __import__("transformers").MambaConfig(), "state-space/recurrent"),
        (lambda: __import__("transformers").LlavaConfig(), "multimodal"),
    ],
)
def test_refuses_non_decoders_in_one_line(tmp_path, capsys, make_config, message):
    source = _config_dir(tmp_path, make_config())
    with pytest.raises(EncoderizeError, match=message):
        load_decoder(str(source))
    code, _, err = _run(["convert", str(source), str(tmp_path / "out")], capsys)
    assert code == 2 and err.startswith("error:") and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_missing_model_and_corrupt_gguf(tmp_path, capsys):
    code, _, err = _run(["convert", str(tmp_path / "nope"), str(tmp_path / "out")], capsys)
    assert code == 2 and "does not exist" in err and err.count("\n") == 1
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 40)
    code, _, err = _run(["convert", str(bad), str(tmp_path / "out")], capsys)
    assert code == 2 and "GGUF" in err and err.count("\n") == 1
    code, _, err = _run(["convert", str(tmp_path / "missing.gguf"), str(tmp_path / "out")], capsys)
    assert code == 2 and "does not exist" in err
    assert not (tmp_path / "out").exists()


def test_gguf_with_unsupported_architecture(tmp_path, capsys):
    gguf = pytest.importorskip("gguf")
    path = tmp_path / "alien.gguf"
    writer = gguf.GGUFWriter(str(path), "alienformer")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    code, _, err = _run(["convert", str(path), str(tmp_path / "out")], capsys)
    assert code == 2 and "GGUF" in err and err.count("\n") == 1


def test_non_empty_output_is_refused_before_loading(decoder_dir, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("precious")
    code, _, err = _run(["convert", str(decoder_dir), str(out)], capsys)
    assert code == 2 and "--overwrite" in err
    assert (out / "keep.txt").read_text() == "precious"


def test_flash_attention_without_gpu_is_refused(decoder_dir, tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, _, err = _run(["convert", str(decoder_dir), str(tmp_path / "o"), "--attn-implementation",
                         "flash_attention_2"], capsys)
    assert code == 2 and "GPU" in err and not (tmp_path / "o").exists()


def test_convert_prints_what_was_done_and_reads_yaml(decoder_dir, tmp_path, capsys):
    config = tmp_path / "convert.yaml"
    config.write_text("attn_implementation: eager\n")
    code, out, _ = _run(["convert", str(decoder_dir), str(tmp_path / "enc"), "--config", str(config)], capsys)
    assert code == 0
    assert "attn_implementation: eager" in out and "mask_token: <mask>" in out and "added" in out
    assert "probe: passed" in out and (tmp_path / "enc" / "model.safetensors").exists()


def test_help_lists_every_subcommand():
    done = subprocess.run([sys.executable, "-m", "hf_encoderize.cli", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert len(COMMANDS) == 17  # accelerate-config (issue 67) the 17th
    for name, command in COMMANDS.items():  # its own line in the command list, with its help text
        assert re.search(rf"^ +{re.escape(name)}\s+{re.escape(command.help.split()[0])}", done.stdout, re.M), name


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_command_help_lists_every_field_with_its_docstring(name, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([name, "--help"])
    assert exit_.value.code == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"usage: hf-encoderize {name} ")
    flat = "".join(printed.split())  # argparse wraps help text anywhere
    for cls in COMMANDS[name].configs:
        docs = field_docs(cls)
        for field in dataclasses.fields(cls):
            if stages.stage_of(field):  # `run`'s stages: every option of the stage's class, prefixed
                inner = field_docs(stages.stage_class(cls, field))
                for sub in stages.stage_fields(cls, field):
                    argument = flag(stages.key(cls, field, sub))
                    assert re.search(rf"(?<![\w-]){re.escape(argument)}(?![\w-])", printed), (name, argument)
                    said = "".join(stages.prefixed_text(inner[sub.name], cls, field).split())[:40]
                    assert said in flat, (name, sub.name)
                continue
            name_of = option_name(cls, field)  # the public name (`--learning-rate` for the field `lr`)
            argument = name_of if not field.kw_only else flag(name_of)
            assert re.search(rf"(?<![\w-]){re.escape(argument)}(?![\w-])", printed), (name, argument)
            assert docs.get(field.name) and "".join(docs[field.name].split())[:40] in flat, (name, field.name)


def test_unknown_config_file_key_is_one_line(decoder_dir, tmp_path, capsys):
    config = tmp_path / "convert.yaml"
    for text, key in [("attn_implementation: eager\nattn_implementaton: sdpa\n", "'attn_implementaton'"),
                      ("steps: 10\n", "'steps'")]:  # a key of another command (cpt) is no option of convert
        config.write_text(text)
        code, _, err = _run(["convert", str(decoder_dir), str(tmp_path / "enc"), "--config", str(config)], capsys)
        assert code == 2 and err.startswith("error:") and err.count("\n") == 1 and key in err, err
        assert "convert --help" in err and not (tmp_path / "enc").exists()


def test_unknown_hub_id_is_one_line(tmp_path, capsys):
    code, _, err = _run(["convert", "no-such-org/no-such-model", str(tmp_path / "out")], capsys)
    assert code == 2 and "no-such-org/no-such-model" in err and err.count("\n") == 1


def test_architectures_command_prints_the_table(tmp_path, capsys):
    out = tmp_path / "arch.md"
    code, printed, _ = _run(["architectures", "--model-types", "llama", "bert", "--write", str(out)], capsys)
    assert code == 0 and "| llama | decoder-only | pass | pass |" in printed
    assert "| bert | encoder |" in printed and out.read_text() == printed
