"""A library's line is off unless -v (issue 67 point 3), on a fresh process's real stderr: transformers' loading and
shard-writing bars, its warnings, torch's pin_memory warning and DeepSpeed's accelerator notice are not printed by a
default run; `-v` shows them, each named after its library rather than with our `warning:` prefix."""

import os
import subprocess
import sys

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
ENV.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
ENV.pop("TRANSFORMERS_VERBOSITY", None)
NOISE = ("Loading weights", "Writing model shards", "[transformers]", "Setting accelerator to CPU", "pin_memory",
         "warning: [")


def _contrastive(encoder, text, out, *flags) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "hf_encoderize.cli", *flags, "contrastive", str(encoder), "--data-files", str(text),
            "--max-steps", "2", "--batch-size", "8", "--max-seq-length", "16", "--save-steps", "100", "--output-dir",
            str(out), "--no-progress"]
    return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=600)


def test_a_default_run_prints_no_library_line_and_verbose_names_each_library(encoder, text, tmp_path):
    quiet = _contrastive(encoder, text, tmp_path / "a")
    assert quiet.returncode == 0, quiet.stderr[-3000:]
    assert not [word for word in NOISE if word in quiet.stderr], quiet.stderr[-3000:]
    assert "output_dir: " in quiet.stdout
    verbose = _contrastive(encoder, text, tmp_path / "b", "-v")
    assert verbose.returncode == 0, verbose.stderr[-3000:]
    said = verbose.stderr
    assert "Loading weights" in said and "Writing model shards" in said  # transformers' own bars, back with -v
    assert "[transformers] " in said  # transformers' handler names it
    pin = next(line for line in said.splitlines() if "'pin_memory' argument" in line)
    assert pin.split("[torch] warning: ", 1)[1].startswith("'pin_memory' argument"), pin
    assert "warning: [" not in said  # never our prefix in front of a library's line
