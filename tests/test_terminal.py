"""The terminal (issue 67): stdout is the command's result alone, one JSON object with `--json`, on the streams a
shell sees; `--print-config` shows the effective settings; `--help` and `--version` import no torch (their time is
`benchmarks/cli_startup.py`'s, not a test's)."""

import json
import os
import subprocess
import sys

import yaml
from conftest import write_corpus

from hf_encoderize import cli

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
TINY = ["--max-seq-length", "32", "--batch-size", "2", "--max-steps", "3", "--eval-documents", "2", "--save-steps",
        "100", "--progress"]


def test_help_and_version_import_no_torch():
    """Top-level --help and --version build the parser without the commands' modules (torch took 1.5 s of 2-3.5)."""
    for flag in ("--help", "--version"):
        code = (f"import runpy, sys\nsys.argv = ['hf-encoderize', {flag!r}]\ntry:\n    runpy.run_module("
                "'hf_encoderize.cli', run_name='__main__')\nexcept SystemExit:\n    pass\nprint('TORCH', 'torch' in "
                "sys.modules)")
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip().endswith("TORCH False"), done.stdout
    listed = subprocess.run([sys.executable, "-m", "hf_encoderize.cli", "--help"], capture_output=True, text=True,
                            env=ENV, timeout=120).stdout
    assert all(name in listed for name in cli.COMMANDS)  # every command still listed, with its help


def _piped(command: str, raw) -> subprocess.CompletedProcess:
    """`command | tee RAW | python -m json.tool` (bash, pipefail: any failing part fails it)."""
    return subprocess.run(f"set -o pipefail; {command} | tee {raw} | {sys.executable} -m json.tool", shell=True,
                          executable="/bin/bash", capture_output=True, text=True, env=ENV, timeout=600)


def test_json_is_one_object_on_a_real_stdout(decoder_dir, tmp_path):
    """`hf-encoderize X --json ... | python -m json.tool` in fresh processes: stdout holds exactly one JSON object
    (the progress bar, the held-out scores and every library line go to stderr)."""
    corpus = write_corpus(tmp_path / "docs.jsonl", 40, lambda i: 8)
    py = sys.executable
    runs = {
        "cpt": f"{py} -m hf_encoderize.cli cpt {decoder_dir} --data-files {corpus} --output-dir {tmp_path / 'run'} "
               f"{' '.join(TINY)} --json",
        "convert": f"{py} -m hf_encoderize.cli convert {decoder_dir} {tmp_path / 'conv'} --json",
    }
    for name, command in runs.items():
        done = _piped(command, tmp_path / f"{name}.out")
        assert done.returncode == 0, done.stderr
        raw = (tmp_path / f"{name}.out").read_text()
        assert json.loads(raw) == json.loads(done.stdout), raw  # the whole of stdout is the one object
        assert raw.startswith("{") and raw.rstrip().endswith("}"), raw
    assert json.loads((tmp_path / "cpt.out").read_text())["steps"] == 3
    assert json.loads((tmp_path / "convert.out").read_text())["output_dir"] == str(tmp_path / "conv")


def test_contrastive_prints_its_result_alone_on_stdout(encoder, text, tmp_path, capsys):
    """The Trainer writes its log dicts with `tqdm.write` (or `print`): to stdout, before the result, even with -q.
    Now they go to stderr, and stdout holds the `key: value` result only (or, with --json, one object)."""
    argv = ["contrastive", str(encoder), "--data-files", str(text), "--max-steps", "4", "--batch-size", "8",
            "--max-seq-length", "16", "--save-steps", "100"]
    for before, extra in (([], ["--output-dir", str(tmp_path / "a")]), (["-q"], ["--output-dir", str(tmp_path / "b")])):
        assert cli.main([*before, *argv, *extra]) == 0
        out = capsys.readouterr().out
        lines = out.splitlines()
        assert lines and all(": " in line and not line.startswith("{") for line in lines), out
        assert "train_runtime" not in out and "'loss'" not in out, out
    assert cli.main([*argv, "--output-dir", str(tmp_path / "c"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["output_dir"] == str(tmp_path / "c")


def test_print_config_shows_the_effective_settings_and_runs_nothing(tmp_path, capsys):
    """`--print-config`: the settings as the command would run them, as YAML keyed by option names, which `--config`
    reads back; nothing is trained or written."""
    out = tmp_path / "never"
    assert cli.main(["cpt", "some/model", "--max-steps", "50", "--output-dir", str(out), "--print-config"]) == 0
    printed = capsys.readouterr().out
    settings = yaml.safe_load(printed)
    assert settings["max_steps"] == 50 and settings["learning_rate"] == 1e-4 and "mlm_probability" in settings
    assert "source=some/model" in printed.splitlines()[0] and not out.exists()
    (tmp_path / "printed.yaml").write_text(printed)
    assert cli.main(["cpt", "some/model", "--config", str(tmp_path / "printed.yaml"), "--print-config"]) == 0
    assert yaml.safe_load(capsys.readouterr().out) == settings  # what it prints, --config reads back
    for command in ("card", "export", "doctor"):
        positional = [] if command == "doctor" else [str(tmp_path)]
        assert cli.main([command, *positional, "--print-config"]) == 0
        assert isinstance(yaml.safe_load(capsys.readouterr().out), dict)


def test_library_noise_is_off_unless_verbose(monkeypatch, capsys, recwarn):
    """transformers' "layers were not sharded" at every load and torch's pin_memory warning at every Trainer run on
    a CPU: off by default, shown with -v (naming their library, first: `[torch] warning: ...`)."""
    import dataclasses
    import logging
    import warnings

    def noisy(*configs):
        logging.getLogger("transformers.distributed.tensor_parallel").warning("The following layers were not sharded: "
                                                                              "model.norm.weight")
        where = "/venv/site-packages/torch/utils/data/dataloader.py"  # raised in torch, as the Trainer's is
        warnings.warn_explicit("'pin_memory' argument is set as true but no accelerator is found, then device pinned "
                               "memory won't be used.", UserWarning, where, 683, module="torch.utils.data.dataloader")
        return "result"

    monkeypatch.setitem(cli.COMMANDS, "doctor", dataclasses.replace(cli.COMMANDS["doctor"], function=noisy))
    seen = []  # what passes the logger's filters (transformers prints through its own handler, wherever it points)
    catcher = logging.Handler()
    catcher.emit = seen.append
    logging.getLogger("transformers.distributed.tensor_parallel").addHandler(catcher)
    try:
        assert cli.main(["doctor"]) == 0
        said = capsys.readouterr()
        assert said.out == "result" and "not sharded" not in said.err and "pin_memory" not in said.err and not seen
        assert not [w for w in recwarn if "pin_memory" in str(w.message)]
        assert cli.main(["-v", "doctor"]) == 0
        assert [record.getMessage() for record in seen] == ["The following layers were not sharded: model.norm.weight"]
        assert ("[torch] warning: 'pin_memory' argument is set as true but no accelerator is found, then device pinned "
                "memory won't be used. (UserWarning, torch/utils/data/dataloader.py:683)") in capsys.readouterr().err
    finally:
        logging.getLogger("transformers.distributed.tensor_parallel").removeHandler(catcher)
