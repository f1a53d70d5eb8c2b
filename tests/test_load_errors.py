"""Every way a model fails to load has its own one-line error from the CLI: exit code 2, exactly one `error:` line, no
traceback, and no output folder created.

The classes: not found (a path that does not exist, a Hub id not in the cache while offline), no tokenizer files,
corrupt weights (truncated, or not safetensors at all), an attention backend the architecture lacks asked explicitly,
and a corrupt config.json. Every case runs in-process through `cli.main` for both commands, and two of them run in
real CLI subprocesses (each pays about 4 s of torch and transformers imports); `-m slow` runs every case of both
commands in subprocesses.
"""

import os
import shutil
import subprocess
import sys

import pytest
from conftest import make_decoder, make_tokenizer, write_corpus

from hf_encoderize.cli import main

# case -> (model folder name or Hub id, extra flags, the wording that names the class)
CASES = {
    "missing folder": ("no-such-model", [], "not found (the path does not exist)"),
    "hub id offline": ("no-such-org/no-such-model", [],
                       "not found: no local folder of that name, and the Hub id is not in the local cache while "
                       "HF_HUB_OFFLINE is set"),
    "no tokenizer": ("no-tokenizer", [], "no tokenizer files in"),
    "truncated weights": ("truncated", [], "corrupt weights (file model.safetensors: truncated:"),
    "garbage weights": ("garbage", [], "corrupt weights (file model.safetensors: header larger than the file"),
    "unsupported backend": ("gpt-neo", ["--attn-implementation", "sdpa"],
                            "gpt_neo (GPTNeoForCausalLM) does not support --attn-implementation sdpa"),
    "corrupt config": ("bad-config", [], "corrupt config.json in"),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """One folder per broken-model class, next to a good tiny Llama they are copied from."""
    root = tmp_path_factory.mktemp("broken")
    good = root / "good"
    make_decoder().save_pretrained(good)
    make_tokenizer().save_pretrained(good)
    make_decoder().save_pretrained(root / "no-tokenizer")
    for name in ("truncated", "garbage", "bad-config"):
        shutil.copytree(good, root / name)
    weights = (good / "model.safetensors").read_bytes()
    (root / "truncated" / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    (root / "garbage" / "model.safetensors").write_bytes(b"garbage!" * 1000)
    (root / "bad-config" / "config.json").write_text('{"model_type": "llama", ')
    # GPT-Neo has no sdpa kernel (GPT-J, used before, has one since transformers 5.24)
    make_decoder("gpt_neo", "eager", attention_types=[[["global", "local"], 1]], window_size=8).save_pretrained(
        root / "gpt-neo")
    make_tokenizer().save_pretrained(root / "gpt-neo")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("data") / "docs.jsonl", 40, lambda i: 5 + i % 11)


def _source(models, case: str) -> str:
    name = CASES[case][0]
    return name if "/" in name else str(models / name)


def _argv(command: str, models, corpus, case: str, out) -> list[str]:
    source, flags = _source(models, case), CASES[case][1]
    if command == "convert":
        return ["convert", source, str(out), *flags]
    return ["cpt", source, "--data-files", str(corpus), "--max-seq-length", "32", "--batch-size", "2", "--max-steps",
            "2",
            "--eval-documents", "4", "--no-progress", "--output-dir", str(out), *flags]


def _run_all(commands: dict[str, str], models, corpus, root) -> dict:
    """Each case (-> its command) in its own CLI process, all at once: case -> (exit code, stderr, output folder)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "TOKENIZERS_PARALLELISM": "false"}
    running = {}
    for index, (case, command) in enumerate(commands.items()):
        out = root / f"out-{index}"
        argv = [sys.executable, "-m", "hf_encoderize.cli", *_argv(command, models, corpus, case, out)]
        running[case] = (subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env),
                         out)
    results = {}
    for case, (process, out) in running.items():
        _, err = process.communicate(timeout=300)
        results[case] = (process.returncode, err, out)
    return results


def _assert_refused(code: int, err: str, out, case: str) -> None:
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, (case, err)
    assert CASES[case][2] in errors[0], (case, errors[0])
    assert not out.exists(), case


def _in_process(command: str, models, corpus, case: str, out, capsys) -> tuple[int, str, object]:
    code = main(_argv(command, models, corpus, case, out))
    return code, capsys.readouterr().err, out


@pytest.mark.parametrize("command", ["convert", "cpt"])
@pytest.mark.parametrize("case", list(CASES))
def test_each_load_error_is_refused_in_its_own_words(command, case, models, corpus, tmp_path, capsys):
    _assert_refused(*_in_process(command, models, corpus, case, tmp_path / "out", capsys), case)


def test_the_real_cli_refuses_in_one_line(models, corpus, tmp_path):
    results = _run_all({"garbage weights": "convert", "unsupported backend": "cpt"}, models, corpus, tmp_path)
    for case, result in results.items():
        _assert_refused(*result, case)


@pytest.mark.slow
@pytest.mark.parametrize("command", ["convert", "cpt"])
def test_the_real_cli_refuses_every_case(command, models, corpus, tmp_path):
    for case, result in _run_all(dict.fromkeys(CASES, command), models, corpus, tmp_path).items():
        _assert_refused(*result, case)


def test_the_classes_are_told_apart(models, corpus, tmp_path, capsys):
    for case in CASES:
        _, err, _ = _in_process("convert", models, corpus, case, tmp_path / "out", capsys)
        line = next(line for line in err.splitlines() if line.startswith("error:"))
        assert not [other for other in CASES if other != case and CASES[other][2] in line], (case, line)
