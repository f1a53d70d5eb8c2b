"""stdout is the result, and -q is quiet (issue 49, point 5), checked on the streams a shell sees: a cpt in a fresh
process (DeepSpeed, transformers and tqdm write to the real streams, not through our logging). Without -q: progress
and the held-out scores on stderr, the JSON summary alone on stdout, and "pass N begins" said once however many passes
a small corpus makes. With -q: the JSON alone on stdout, and stderr holds only warnings and errors."""

import json
import os
import subprocess
import sys

from conftest import write_corpus

TINY = ["--seq-len", "32", "--batch-size", "2", "--steps", "20", "--eval-documents", "2", "--save-steps", "100"]


def cpt(decoder_dir, tmp_path, *before: str) -> subprocess.CompletedProcess:
    """`hf-encoderize [BEFORE] cpt ...` with the progress bar on (as in a terminal), in a fresh process."""
    corpus = write_corpus(tmp_path / "docs.jsonl", 40, lambda i: 8)  # ~340 tokens: 20 steps make 3-4 passes
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "hf_encoderize.cli", *before, "cpt", str(decoder_dir),
                           "--data-files", str(corpus), "--output-dir", str(tmp_path / "run"), *TINY, "--progress"],
                          capture_output=True, text=True, env=env, timeout=600)


def only_the_summary(stdout: str) -> dict:
    lines = stdout.strip().splitlines()
    assert len(lines) == 1, stdout  # no DeepSpeed line, no "step N: eval_loss" line
    return json.loads(lines[0])


def test_stdout_is_the_summary_and_progress_goes_to_stderr(decoder_dir, tmp_path):
    done = cpt(decoder_dir, tmp_path)
    assert done.returncode == 0, done.stderr
    summary = only_the_summary(done.stdout)
    assert summary["steps"] == 20
    assert "step 0: eval_loss" in done.stderr and "step 20: eval_loss" in done.stderr  # said, on stderr
    assert done.stderr.count("over them begins") == 1, done.stderr  # a small corpus: many passes, one line


def test_quiet_prints_the_result_and_nothing_but_warnings(decoder_dir, tmp_path):
    done = cpt(decoder_dir, tmp_path, "-q")
    assert done.returncode == 0, done.stderr
    only_the_summary(done.stdout)
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert said and all(line.startswith(("warning:", "error:")) for line in said), done.stderr  # no bars, no notes
