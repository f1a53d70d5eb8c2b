"""Long phases show progress with an ETA (issue 67 point 4), on a fresh process's real stderr: `eval`'s grid of
fine-tunings has one bar over all its runs, under the runs' progress lines; `-q` draws none."""

import os
import re
import subprocess
import sys

ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
SMALL = ["--profile", "smoke", "--datasets", "syn-sentiment", "--seeds", "0,1", "--max-steps", "2", "--batch-size", "4",
         "--max-seq-length", "32"]


def _eval(model, out, *flags) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "hf_encoderize.cli", *flags, "eval", str(model), *SMALL, "--output-dir", str(out)]
    return subprocess.run(argv, capture_output=True, text=True, env=ENV, timeout=600)


def test_the_eval_grid_has_one_bar_with_an_eta(decoder_dir, tmp_path):
    done = _eval(decoder_dir, tmp_path / "a")
    assert done.returncode == 0, done.stderr[-3000:]
    drawn = re.findall(r"eval: +(\d+)%\|[^|]*\| (\d+)/(\d+) \[[0-9:]+<([0-9:?]+)", done.stderr)
    assert drawn and {total for *_, total, _ in drawn} == {"2"}, done.stderr[-3000:]  # two fine-tunings, one bar
    assert drawn[-1][:3] == ("100", "2", "2")
    assert any(eta != "?" for *_, eta in drawn)  # an ETA once a run is timed
    assert "[2/2] sc/syn-sentiment lr=0.0002 seed=1: validation" in done.stderr  # the run lines still said
    assert done.stdout.startswith("# Evaluation of")  # stdout: the result alone
    quiet = _eval(decoder_dir, tmp_path / "b", "-q")
    assert quiet.returncode == 0 and "eval:" not in quiet.stderr, quiet.stderr[-3000:]
