"""The output-folder policy (tests/test_output_policy.py) under concurrency, and the modes a saved encoder gets: two
converts racing into one folder, an `--overwrite` that meets another run's lock between its checks and its clearing,
and files written with the modes the umask gives."""

import os
import subprocess
import sys

import test_output_policy as policy
from conftest import make_decoder, make_tokenizer
from test_output_policy import LOCK, _copy, _cpt, _tree

from hf_encoderize.cli import main

corpus, cpt_run = policy.corpus, policy.cpt_run  # its module-scoped fixtures, defined once

RACER = """
import sys, time
from hf_encoderize.model import saving
real = saving._write_encoder
def slow(*args, **kwargs):
    time.sleep(4)  # both converts are past their checks before either saves
    return real(*args, **kwargs)
saving._write_encoder = slow
from hf_encoderize.cli import main
raise SystemExit(main(sys.argv[1:]))
"""


def test_two_converts_into_one_folder_one_is_refused(decoder_dir, tmp_path):
    """Two converts into one folder both exited 0 and one model was lost: the folder is locked before the model
    loads, so the second is refused in one line (in use, or not empty when it starts after the first finished)."""
    out = tmp_path / "enc"
    argv = ["convert", str(decoder_dir), str(out), "--no-verify"]
    runs = [subprocess.Popen([sys.executable, "-c", RACER, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True) for _ in range(2)]
    done = [(run.wait(timeout=600), run.stderr.read()) for run in runs]
    codes = sorted(code for code, _ in done)
    assert codes == [0, 2], [(code, err[-1500:]) for code, err in done]
    refused = next(err for code, err in done if code == 2)
    errors = [line for line in refused.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and ("in use" in errors[0] or "not empty" in errors[0]) and "Traceback" not in refused
    assert (out / "model.safetensors").is_file() and not (out / LOCK).exists()


HOLDER = """
import json, os, socket, sys, time
from filelock import FileLock
lock = FileLock(sys.argv[1], timeout=0, is_singleton=False)
lock.acquire()
open(sys.argv[1], "w").write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "command": "cpt"}))
print("held", flush=True)
time.sleep(600)
"""


def test_an_overwrite_meets_the_lock_before_it_deletes_anything(decoder_dir, corpus, cpt_run, tmp_path, request,
                                                                 monkeypatch, capsys):
    """Two --overwrite runs into one folder: the second passed its checks while the first was still loading, then
    cleared the live run's run_settings.json, metrics.jsonl and marker, and only then met the lock. Here the other
    run takes the lock (a real flock, in another process) between this run's checks and its clearing."""
    from hf_encoderize.training import checkpoints

    run = _copy(cpt_run, tmp_path / "run")
    real = checkpoints.clear_for_run

    def the_other_run_starts_meanwhile(*args, **kwargs):
        holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(run / LOCK)], stdout=subprocess.PIPE, text=True)
        request.addfinalizer(lambda: (holder.kill(), holder.wait()))
        assert holder.stdout.readline().strip() == "held"
        before.update(_tree(tmp_path))
        return real(*args, **kwargs)

    before: dict = {}
    monkeypatch.setattr(checkpoints, "clear_for_run", the_other_run_starts_meanwhile)
    code = main(_cpt(decoder_dir, corpus, run, "--overwrite"))
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "in use" in errors[0] and "Traceback" not in err, err
    assert before and _tree(tmp_path) == before  # run_settings.json, metrics.jsonl, the marker: all still there


def test_a_saved_encoder_has_the_modes_the_umask_gives(tmp_path):
    """model.safetensors was written 0600 while the rest of the folder was 0644 (issue 41)."""
    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.saving import save_encoder

    model, tokenizer = make_decoder(), make_tokenizer()
    report = encoderize(model, tokenizer)
    mask = os.umask(0o027)
    try:
        out = save_encoder(model, tokenizer, tmp_path / "enc", metadata=report.to_dict())
    finally:
        os.umask(mask)
    modes = {str(p.relative_to(out)): oct(p.stat().st_mode & 0o777) for p in [out, *out.rglob("*")]}
    expected = {name: oct(0o750 if (out / name).is_dir() else 0o640) for name in modes}
    assert modes == expected
