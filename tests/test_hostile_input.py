"""Hostile or unlucky input never costs the user data: `--overwrite` validates everything before it deletes, and never
deletes a folder hf-encoderize did not write; non-finite training never ends in a saved encoder; a corrupt newest
checkpoint is kept and skipped. Each refusal: exit 2, one `error:` line, no traceback, and every file that was in the
folder before is there after, byte for byte."""

import json
from pathlib import Path

import pytest
import torch
from conftest import write_corpus

from hf_encoderize.cli import main


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("data") / "docs.jsonl", 120, lambda i: 4 + i % 9)


@pytest.fixture(scope="module")
def finished_run(decoder_dir, corpus, tmp_path_factory):
    """A run folder an earlier `cpt` wrote: checkpoints, metrics, record, encoder."""
    out = tmp_path_factory.mktemp("runs") / "earlier"
    assert main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-seq-length", "32", "--batch-size", "4",
                 "--max-steps", "2", "--save-steps", "2", "--eval-steps", "0", "--no-progress", "--output-dir",
                 str(out)]) == 0
    return out


def _cpt_args(decoder_dir, corpus, out) -> list[str]:
    return ["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-seq-length", "32", "--batch-size", "4",
            "--max-steps",
            "2", "--save-steps", "2", "--eval-steps", "0", "--no-progress", "--output-dir", str(out), "--overwrite"]


CASES = {
    "missing model folder": (lambda a, tmp: [a[0], str(tmp / "no-such-model"), *a[2:]], "does not exist"),
    "missing data path": (lambda a, tmp: [*a[:3], str(tmp / "none*.jsonl"), *a[4:]], "no .txt/.jsonl"),
    "wrong text column": (lambda a, tmp: [*a, "--text-column", "body"], "text column 'body' not found"),
    "seq-len above the model's limit": (lambda a, tmp: [*a, "--max-seq-length", "4096"], "above the model's limit"),
    "impossible mask ratio": (lambda a, tmp: [*a, "--mlm-probability", "1.5"], "mlm-probability"),
    "unknown report-to tracker": (lambda a, tmp: [*a, "--report-to", "nosuchtracker"], "unknown tracker"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_overwrite_with_bad_input_keeps_the_earlier_run(case, decoder_dir, corpus, finished_run, tmp_path, capsys):
    before = _snapshot(finished_run)
    make_args, message = CASES[case]
    code = main(make_args(_cpt_args(decoder_dir, corpus, finished_run), tmp_path))
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert _snapshot(finished_run) == before


def _foreign_folder(tmp_path: Path) -> Path:
    mine = tmp_path / "thesis"
    (mine / "chapters").mkdir(parents=True)
    (mine / "chapters" / "one.tex").write_text("irreplaceable")
    (mine / "notes.md").write_text("also mine")
    return mine


def _a_file(tmp_path: Path) -> Path:
    target = tmp_path / "results.txt"
    target.write_text("keep me")
    return target


def _read_only(tmp_path: Path) -> Path:
    folder = tmp_path / "locked"
    folder.mkdir()
    (folder / "keep.txt").write_text("keep me")
    folder.chmod(0o555)
    return folder / "run"


OUTPUT_PATHS = {  # case: (make the user's path -> the --output-dir to pass, extra flags, expected message)
    "a folder hf-encoderize did not write, with --overwrite": (_foreign_folder, ["--overwrite"], "did not write"),
    "a file": (_a_file, ["--overwrite"], "is a file"),
    "a path inside a file": (lambda tmp: _a_file(tmp) / "run", [], "is a file"),
    "an earlier run, without --overwrite": (None, [], "is not empty; use --resume, --overwrite"),
    "--resume with no checkpoint": (lambda tmp: tmp / "fresh", ["--resume"], "no checkpoint under"),
    "a read-only parent folder": (_read_only, [], "read-only"),
}


@pytest.mark.parametrize("case", list(OUTPUT_PATHS))
def test_output_paths_are_checked_before_any_work(case, decoder_dir, corpus, finished_run, tmp_path, capsys):
    """What the user had at or around --output-dir is refused in one line before any work, and stays as it was."""
    import os

    make, flags, message = OUTPUT_PATHS[case]
    if case.startswith("a read-only") and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders; the check (os.access) only refuses for other users")
    output = make(tmp_path) if make else finished_run
    watched = output if output.exists() else next(p for p in output.parents if p.exists())
    before = _snapshot(watched) if watched.is_dir() else watched.read_bytes()
    code = main([*_cpt_args(decoder_dir, corpus, output)[:-1], *flags])
    err = capsys.readouterr().err
    assert code == 2 and _one_error_line(err, message), err
    assert (_snapshot(watched) if watched.is_dir() else watched.read_bytes()) == before


def test_overwrite_replaces_an_earlier_run_when_everything_is_valid(decoder_dir, corpus, finished_run, tmp_path):
    out = tmp_path / "again"
    assert main(_cpt_args(decoder_dir, corpus, out)[:-1]) == 0
    stale = out / "checkpoints" / "step-0000099"  # left by the earlier run (a file of the user's would be refused)
    stale.mkdir()
    assert main(_cpt_args(decoder_dir, corpus, out)) == 0
    assert not stale.exists() and (out / "encoder" / "model.safetensors").is_file()


def _one_error_line(err: str, message: str) -> bool:
    """One `error:` line saying `message`, no traceback (transformers' weight-loading bar may precede it)."""
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    return len(errors) == 1 and message in errors[0] and "Traceback" not in err


def _strict_json_lines(path: Path) -> list[dict]:
    def refuse(constant):
        raise ValueError(f"bare {constant} in {path.name}")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def test_skipped_steps_are_bounded_and_metrics_stay_json(decoder_dir, corpus, tmp_path, monkeypatch, capsys):
    """--on-nonfinite skip with a NaN every other step never reaches "10 in a row"; it used to finish and exit 0. Now
    more than 5% skipped steps stop the run in one line, no encoder is written, and metrics.jsonl is strict JSON."""
    from hf_encoderize.training.engine.loss_model import LossModel

    real_forward = LossModel.forward

    def nan_every_other_call(self, *args):
        loss, correct = real_forward(self, *args)
        if not self.training:  # the held-out evaluations (before the first step, at the end) are not steps
            return loss, correct
        self.calls = getattr(self, "calls", 0) + 1
        return (loss * float("nan"), correct) if self.calls % 2 == 0 else (loss, correct)

    monkeypatch.setattr(LossModel, "forward", nan_every_other_call)
    out = tmp_path / "run"
    code = main([*_cpt_args(decoder_dir, corpus, out)[:-1], "--max-steps", "40", "--save-steps", "100",
                 "--on-nonfinite", "skip"])
    err = capsys.readouterr().err
    assert code == 2 and _one_error_line(err, "steps were non-finite and skipped"), err
    assert not (out / "encoder").exists()
    records = _strict_json_lines(out / "metrics.jsonl")
    skipped = [r["loss"] for r in records if r.get("skipped_nonfinite")]
    # Steps 2, 4, ..., 20 are logged as null (metrics are read in blocks of --logging-steps 10, then checked); the skip
    # at step 20 is the 10th of 20, over 5%, and stops the run.
    assert skipped == [None] * 10


def test_a_model_with_non_finite_weights_is_never_saved(decoder_dir, corpus, tmp_path, monkeypatch, capsys):
    """An update that leaves NaN in the weights (a finite gradient can still overflow) must not end in a saved encoder
    and exit 0: the run stops in one line and `encoder/` is not written."""
    import hf_encoderize.training.engine.loop as train_module

    real_step = train_module.train_step

    def corrupting_step(run, **options):
        stats = real_step(run, **options)
        run.steps_done = getattr(run, "steps_done", 0) + 1
        if run.steps_done == run.train.steps:  # the last step's update leaves NaN behind
            with torch.no_grad():
                next(run.model.parameters()).fill_(float("nan"))
        return stats

    monkeypatch.setattr(train_module, "train_step", corrupting_step)
    out = tmp_path / "run"
    code = main([*_cpt_args(decoder_dir, corpus, out)[:-1], "--eval-steps", "0"])
    err = capsys.readouterr().err
    assert code == 2 and _one_error_line(err, "broken model"), err
    assert not (out / "encoder").exists()


def test_resume_falls_back_past_a_corrupt_newest_checkpoint(decoder_dir, corpus, tmp_path, capsys):
    """A truncated newest checkpoint: resume says so in one line, keeps it (renamed `.corrupt`, bytes intact),
    continues from the one before, and ends with the unbroken run's weights."""
    from safetensors.torch import load_file

    args = [*_cpt_args(decoder_dir, corpus, tmp_path / "x")[:-1], "--max-steps", "4"]
    assert main([*args[:-2], "--output-dir", str(tmp_path / "unbroken"), "--max-steps", "4"]) == 0
    run = tmp_path / "run"
    assert main([*args[:-2], "--output-dir", str(run), "--max-steps", "4"]) == 0  # checkpoints at steps 2 and 4
    newest = run / "checkpoints" / "step-0000004" / "model.safetensors"
    newest.write_bytes(newest.read_bytes()[:100])  # truncated
    capsys.readouterr()
    assert main([*args[:-2], "--output-dir", str(run), "--max-steps", "4", "--resume"]) == 0
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning: checkpoint")]
    assert len(warnings) == 1 and "step-0000004" in warnings[0] and "Traceback" not in err, err
    kept = run / "checkpoints" / "step-0000004.corrupt" / "model.safetensors"
    assert kept.stat().st_size == 100
    resumed, unbroken = (load_file(d / "encoder" / "model.safetensors") for d in (run, tmp_path / "unbroken"))
    for name, tensor in unbroken.items():
        torch.testing.assert_close(resumed[name], tensor, msg=name)


@pytest.fixture(scope="module")
def interrupted(decoder_dir, corpus, tmp_path_factory):
    """A 12-step cpt stopped after its step-4 checkpoint (WSD: decay over the last step, from step 11)."""
    import hf_encoderize.training.engine.loop as train_module

    out = tmp_path_factory.mktemp("runs") / "interrupted"
    real_step, calls = train_module.train_step, []

    def dies_at_step_five(run, **options):
        calls.append(1)
        if len(calls) == 5:
            raise KeyboardInterrupt
        return real_step(run, **options)

    train_module.train_step = dies_at_step_five
    try:
        assert main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-seq-length", "32", "--batch-size",
                     "4",
                     "--max-steps", "12", "--save-steps", "4", "--eval-steps", "0", "--no-progress", "--output-dir",
                     str(out)]) == 130
    finally:
        train_module.train_step = real_step
    return out


INTERRUPTS = {  # Ctrl-C during step N of a 4-step run saving every 2 steps -> what the one line must say
    "after the step-2 checkpoint": (3, "step-0000002"),
    "after the step-4 checkpoint, before the encoder is saved": (4, "step-0000002"),
    "before any checkpoint": (1, "no checkpoint was written yet"),
}


@pytest.mark.parametrize("case", list(INTERRUPTS))
def test_an_interrupt_says_how_to_go_on(case, decoder_dir, corpus, tmp_path, monkeypatch, capsys):
    """Ctrl-C: exit 130 and one line saying what is left (the newest checkpoint and --resume, or that nothing was
    saved yet); the command it suggests then finishes the run."""
    import hf_encoderize.training.engine.loop as train_module

    at_step, message = INTERRUPTS[case]
    real_step, calls = train_module.train_step, []

    def ctrl_c(run, **options):
        calls.append(1)
        if len(calls) == at_step:
            raise KeyboardInterrupt
        return real_step(run, **options)

    args = [*_cpt_args(decoder_dir, corpus, tmp_path / "run")[:-1], "--max-steps", "4"]
    monkeypatch.setattr(train_module, "train_step", ctrl_c)
    assert main(args) == 130
    err = capsys.readouterr().err
    assert _one_error_line(err, message) and "Traceback" not in err, err
    monkeypatch.setattr(train_module, "train_step", real_step)
    go_on = ["--resume"] if "--resume" in err else ["--overwrite"]
    assert main([*args, *go_on]) == 0


RESUME_CHANGES = {
    "--learning-rate": ("1e-3", "lr was 0.0001, now 0.001"),
    "--batch-size": ("8", "batch_size was 4, now 8"),
    "--max-seq-length": ("16", "seq_len"),
    "--mlm-probability": ("0.3", "mask_ratio was 0.4, now 0.3"),
    "--gradient-accumulation-steps": ("2", "grad_accum was 1, now 2"),
    "--max-steps": ("8", "a resume allows a larger --max-steps"),
}


@pytest.mark.parametrize("flag", list(RESUME_CHANGES))
def test_resume_refuses_changed_settings(flag, decoder_dir, corpus, interrupted, capsys):
    """Resuming with other settings used to train on a mix while run_record.json reported the new ones."""
    value, message = RESUME_CHANGES[flag]
    before = _snapshot(interrupted)
    args = ["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-seq-length", "32", "--batch-size", "4",
            "--max-steps",
            "12", "--save-steps", "4", "--eval-steps", "0", "--no-progress", "--output-dir", str(interrupted),
            "--resume"]
    at = args.index(flag) if flag in args else None
    args = args[:at + 1] + [value] + args[at + 2:] if at is not None else [*args, flag, value]
    if flag == "--max-steps":
        args += ["--warmup-steps", "2"]  # the default warmup follows --max-steps (12 // 5 = 2, 8 // 5 = 1)
    code = main(args)
    err = capsys.readouterr().err
    assert code == 2 and _one_error_line(err, message), err
    assert _snapshot(interrupted) == before


def test_resume_may_extend_steps_before_the_decay(decoder_dir, corpus, interrupted, tmp_path, capsys):
    """The one safe change: a larger --max-steps before the decay began; the record then says the new length. The
    default warmup would follow --max-steps (12 // 5 = 2, 20 // 5 = 4): a resume keeps the run's instead (issue 49,
    point 7); the default decay follows it, and may (the decay starts after the checkpoint)."""
    import shutil

    run = tmp_path / "extended"
    shutil.copytree(interrupted, run)
    args = ["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-seq-length", "32", "--batch-size", "4",
            "--max-steps",
            "20", "--save-steps", "4", "--eval-steps", "0", "--no-progress", "--output-dir", str(run), "--resume"]
    assert main(args) == 0, capsys.readouterr().err
    record = json.loads((run / "run_record.json").read_text())
    assert record["steps"] == 20 and json.loads((run / "run_settings.json").read_text())["steps"] == 20
    assert record["decay_steps"] == 4 and record["warmup_steps"] == 2


def test_resume_refuses_to_extend_a_run_inside_its_decay(decoder_dir, corpus, finished_run, capsys):
    before = _snapshot(finished_run)
    code = main([*_cpt_args(decoder_dir, corpus, finished_run)[:-1], "--max-steps", "4", "--resume"])
    assert code == 2 and _one_error_line(capsys.readouterr().err, "past the start of the run's learning-rate decay")
    assert _snapshot(finished_run) == before


def test_resume_never_unpickles_code_from_a_checkpoint(decoder_dir, corpus, tmp_path, capsys):
    """Checkpoint files replaced by pickles that run code when loaded: nothing runs. Our own training state is JSON
    (Accelerate's custom-state files, unpickled with weights_only=False, are neither written nor read), and
    Accelerate's own files are read with torch's weights_only loader, which refuses them: resume falls back."""
    import pickle

    marker = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    run = tmp_path / "run"
    args = [*_cpt_args(decoder_dir, corpus, run)[:-1], "--max-steps", "4"]
    assert main(args) == 0
    newest = run / "checkpoints" / "step-0000004"
    for index in range(3):  # where Accelerate's register_for_checkpointing would have put scheduler, packer, masker
        (newest / f"custom_checkpoint_{index}.pkl").write_bytes(pickle.dumps(Payload()))
    assert main([*args, "--resume"]) == 0 and not marker.exists()  # Accelerate refuses the stray files unread
    for path in [*newest.glob("*.pkl"), *newest.glob("*.bin")]:  # the re-written step 4: optimizer and RNG files
        path.write_bytes(pickle.dumps(Payload()))
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    err = capsys.readouterr().err
    assert not marker.exists(), "a checkpoint file ran code on --resume"
    assert [line for line in err.splitlines() if line.startswith("warning:")], err
    assert (run / "checkpoints" / "step-0000004.corrupt2").is_dir()  # the first corrupt copy is kept too


def test_resume_refuses_a_longer_run_whose_decay_starts_before_the_checkpoint(decoder_dir, corpus, interrupted,
                                                                             capsys):
    """Extending the 12-step run (checkpoint at 4) to 20 steps with an 18-step decay puts the decay's start at step 2,
    behind the checkpoint: the LR would drop at once. It was accepted (issue 41); now one line, nothing changed."""
    before = _snapshot(interrupted)
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-seq-length", "32", "--batch-size", "4",
                 "--max-steps", "20", "--warmup-steps", "2", "--decay-steps", "18", "--save-steps", "4", "--eval-steps",
                 "0", "--no-progress", "--output-dir", str(interrupted), "--resume"])
    err = capsys.readouterr().err
    assert code == 2 and _one_error_line(err, "would start at step 2, before the checkpoint (step 4)"), err
    assert "--decay-steps 16 or less" in err
    assert _snapshot(interrupted) == before
