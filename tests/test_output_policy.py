"""One output-folder policy for every command (`common/outputs.py`): `--overwrite` deletes only a folder an earlier run
of ours wrote (it carries our marker and holds nothing else), never the working folder, a symlink's target, an input,
or a folder a live run holds (its lock file). Each refusal: exit 2, one `error:` line, no traceback, and every file
under the test's folder is there after, byte for byte, with nothing added.

The marker and lock are spelled out here (not imported), so the table runs, and fails row by row, against code that
has no policy module."""

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import make_decoder, make_tokenizer, write_corpus

from hf_encoderize.cli import main
from hf_encoderize.recipes.contrastive import work_dir

MARKER, LOCK = ".hf-encoderize.json", ".hf-encoderize.lock"


def _tree(root: Path) -> dict:
    """Every entry under `root`, links not followed: file -> content hash, folder -> 'dir', link -> its target."""
    seen = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            path = Path(folder) / name
            key = str(path.relative_to(root))
            if path.is_symlink():
                seen[key] = f"link:{os.readlink(path)}"
            elif path.is_dir():
                seen[key] = "dir"
            else:
                seen[key] = hashlib.sha256(path.read_bytes()).hexdigest()
    return seen


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("data") / "docs.jsonl", 60, lambda i: 4 + i % 9)


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "text.jsonl"
    path.write_text("".join(json.dumps({"text": " ".join(f"w{(i * 7 + j) % 100}" for j in range(8))}) + "\n"
                            for i in range(48)))
    return path


def _cpt(model, corpus, out, *flags) -> list[str]:
    return ["cpt", str(model), "--data-files", str(corpus), "--max-seq-length", "32", "--batch-size", "4",
            "--max-steps", "2",
            "--save-steps", "2", "--eval-steps", "0", "--eval-documents", "8", "--no-progress",
            "--output-dir", str(out), *flags]


def _contrastive(encoder, text, out, *flags) -> list[str]:
    return ["contrastive", str(encoder), "--data-files", str(text), "--output-dir", str(out), "--max-steps", "2",
            "--batch-size", "8", "--max-seq-length", "16", "--save-steps", "1", "--no-progress", *flags]


@pytest.fixture(scope="module")
def cpt_run(decoder_dir, corpus, tmp_path_factory):
    """A run folder an earlier `cpt` of this version wrote."""
    out = tmp_path_factory.mktemp("runs") / "earlier"
    assert main(_cpt(decoder_dir, corpus, out)) == 0
    return out


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """An encoder folder an earlier `convert` of this version wrote."""
    out = tmp_path_factory.mktemp("enc") / "encoder"
    assert main(["convert", str(_saved_decoder(tmp_path_factory.mktemp("dec"))), str(out), "--no-verify"]) == 0
    return out


@pytest.fixture(scope="module")
def contrastive_out(encoder, text, tmp_path_factory):
    """An embedding model an earlier `contrastive` of this version wrote."""
    out = tmp_path_factory.mktemp("emb") / "simcse"
    assert main(_contrastive(encoder, text, out)) == 0
    return out


def _saved_decoder(folder: Path) -> Path:
    make_decoder().save_pretrained(folder / "decoder")
    make_tokenizer().save_pretrained(folder / "decoder")
    return folder / "decoder"


def _copy(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, symlinks=True)
    (target / LOCK).unlink(missing_ok=True)
    return target


def _user_folder(tmp: Path) -> Path:
    mine = tmp / "thesis"
    (mine / "chapters").mkdir(parents=True)
    (mine / "thesis.tex").write_text("irreplaceable")
    (mine / "chapters" / "one.tex").write_text("also mine")
    return mine


def _with_user_file(folder: Path) -> Path:
    (folder / "thesis.tex").write_text("irreplaceable")
    return folder


def _live_pid(request) -> int:
    """A process that is alive for the whole test (not this one: a lock of our own process is ours to take)."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    request.addfinalizer(lambda: (child.kill(), child.wait()))
    return child.pid


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _lock(folder: Path, pid: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / LOCK).write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "command": "cpt"}))
    return folder


class Ctx:
    """What a case builds its command from: the test's own folder and the module's models, data and runs."""

    def __init__(self, tmp, request, **fixtures):
        self.tmp, self.request = tmp, request
        self.__dict__.update(fixtures)


def _in_cwd(ctx: Ctx, folder: Path) -> None:
    ctx.request.getfixturevalue("monkeypatch").chdir(folder)


def _convert_cwd(ctx):
    _in_cwd(ctx, _copy(ctx.encoder, ctx.tmp / "here"))  # an output of ours, but the folder the user stands in
    return ["convert", str(ctx.decoder_dir), ".", "--overwrite", "--no-verify"]


def _convert_symlink(ctx):
    target = _copy(ctx.encoder, ctx.tmp / "real")
    (ctx.tmp / "link").symlink_to(target, target_is_directory=True)
    return ["convert", str(ctx.decoder_dir), str(ctx.tmp / "link"), "--overwrite", "--no-verify"]


def _convert_into_itself(ctx):
    model = _copy(ctx.decoder_dir, ctx.tmp / "dec")
    return ["convert", str(model), str(model), "--overwrite", "--no-verify"]


def _convert_inside_input(ctx):
    model = _copy(ctx.decoder_dir, ctx.tmp / "dec")
    return ["convert", str(model), str(model / "encoder"), "--no-verify"]


def _convert_over_input_parent(ctx):
    model = _copy(ctx.decoder_dir, ctx.tmp / "work" / "dec")
    (ctx.tmp / "work" / MARKER).write_text(json.dumps({"command": "convert", "entries": ["dec"]}))
    return ["convert", str(model), str(ctx.tmp / "work"), "--overwrite", "--no-verify"]


def _cpt_user_metrics(ctx):
    """A name cpt writes does not make a folder ours: only our marker does."""
    mine = _user_folder(ctx.tmp)
    (mine / "metrics.jsonl").write_text("{}\n")
    return _cpt(ctx.decoder_dir, ctx.corpus, mine, "--overwrite")


def _cpt_cwd(ctx):
    _in_cwd(ctx, _copy(ctx.cpt_run, ctx.tmp / "here"))
    return _cpt(ctx.decoder_dir, ctx.corpus, ".", "--overwrite")


def _cpt_data_inside(ctx):
    run = _copy(ctx.cpt_run, ctx.tmp / "run")
    shutil.copy(ctx.corpus, run / "checkpoints" / "corpus.jsonl")  # an entry of ours holds the input
    return _cpt(ctx.decoder_dir, run / "checkpoints" / "corpus.jsonl", run, "--overwrite")


def _cpt_inside_model(ctx):
    model = _copy(ctx.decoder_dir, ctx.tmp / "dec")
    return _cpt(model, ctx.corpus, model / "run")


def _cpt_symlink(ctx):
    target = _copy(ctx.cpt_run, ctx.tmp / "real")
    (ctx.tmp / "link").symlink_to(target, target_is_directory=True)
    return _cpt(ctx.decoder_dir, ctx.corpus, ctx.tmp / "link", "--overwrite")


def _cpt_locked(*flags):
    def make(ctx):
        run = _lock(_copy(ctx.cpt_run, ctx.tmp / "run"), _live_pid(ctx.request))
        return _cpt(ctx.decoder_dir, ctx.corpus, run, *flags)
    return make


def _contrastive_cwd(ctx):
    _in_cwd(ctx, _copy(ctx.contrastive_out, ctx.tmp / "here"))
    return _contrastive(ctx.encoder, ctx.text, ".", "--overwrite")


def _contrastive_over_its_run(ctx):
    run = _copy(ctx.cpt_run, ctx.tmp / "run")
    return _contrastive(run, ctx.text, run, "--overwrite")


def _contrastive_symlink(ctx):
    target = _copy(ctx.contrastive_out, ctx.tmp / "real")
    (ctx.tmp / "link").symlink_to(target, target_is_directory=True)
    return _contrastive(ctx.encoder, ctx.text, ctx.tmp / "link", "--overwrite")


def _contrastive_live_work(ctx):
    """Another contrastive run is live on the same output: its work folder holds its lock and checkpoints."""
    work = ctx.tmp / ".simcse.work"
    (work / "trainer" / "checkpoint-1").mkdir(parents=True)
    (work / "trainer" / "checkpoint-1" / "model.safetensors").write_bytes(b"weights of the live run")
    (work / "settings.json").write_text("{}")
    _lock(work, _live_pid(ctx.request))
    return _contrastive(ctx.encoder, ctx.text, ctx.tmp / "simcse", "--overwrite")


def _contrastive_resume_over_user_files(ctx):
    """An interrupted run (a checkpoint in its work folder) resumed into an --output-dir that holds the user's file."""
    from sentence_transformers import SentenceTransformerTrainer

    monkeypatch, real = ctx.request.getfixturevalue("monkeypatch"), SentenceTransformerTrainer.training_step
    calls = {"n": 0}

    def dies_at_step_two(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # after the step-1 checkpoint
        return real(self, *args, **kwargs)

    monkeypatch.setattr(SentenceTransformerTrainer, "training_step", dies_at_step_two)
    out = ctx.tmp / "simcse"
    assert main(_contrastive(ctx.encoder, ctx.text, out)) == 130
    assert any(work_dir(out).glob("trainer/checkpoint-*"))
    monkeypatch.setattr(SentenceTransformerTrainer, "training_step", real)
    out.mkdir(exist_ok=True)
    _with_user_file(out)
    return _contrastive(ctx.encoder, ctx.text, out, "--resume")


def _cpt_user_notes_in(sub: str):
    """A known sub-folder of our run holding a file we did not write (issue 41: the whole eval/ was deleted)."""
    def make(ctx):
        run = _copy(ctx.cpt_run, ctx.tmp / "run")
        (run / sub).mkdir(exist_ok=True)
        (run / sub / "NOTES.md").write_text("my notes on the results")
        return _cpt(ctx.decoder_dir, ctx.corpus, run, "--overwrite")
    return make


REFUSED = {  # case: (build the user's folders -> argv, what the one error line says)
    "cpt --overwrite, a user's eval/NOTES.md in our run": (_cpt_user_notes_in("eval"), "'eval/NOTES.md'"),
    "cpt --overwrite, a user's profile/NOTES.md in our run": (_cpt_user_notes_in("profile"), "'profile/NOTES.md'"),
    "cpt --overwrite, a user's exports/NOTES.md in our run": (_cpt_user_notes_in("exports"), "'exports/NOTES.md'"),
    "convert --overwrite, a folder of the user's": (
        lambda c: ["convert", str(c.decoder_dir), str(_user_folder(c.tmp)), "--overwrite", "--no-verify"],
        "did not write"),
    "convert --overwrite, our encoder plus a user file": (
        lambda c: ["convert", str(c.decoder_dir), str(_with_user_file(_copy(c.encoder, c.tmp / "enc"))),
                   "--overwrite", "--no-verify"], "'thesis.tex'"),
    "convert --output-dir . --overwrite": (_convert_cwd, "working folder"),
    "convert --overwrite, a symlinked output folder": (_convert_symlink, "symlink"),
    "convert dec dec --overwrite": (_convert_into_itself, "input"),
    "convert into a folder inside the model": (_convert_inside_input, "input"),
    "convert --overwrite of a folder holding the model": (_convert_over_input_parent, "input"),
    "cpt --overwrite, a folder of the user's": (
        lambda c: _cpt(c.decoder_dir, c.corpus, _user_folder(c.tmp), "--overwrite"), "did not write"),
    "cpt --overwrite, our run plus a user file": (
        lambda c: _cpt(c.decoder_dir, c.corpus, _with_user_file(_copy(c.cpt_run, c.tmp / "run")), "--overwrite"),
        "'thesis.tex'"),
    "cpt --overwrite, a folder of the user's holding a metrics.jsonl": (_cpt_user_metrics, "did not write"),
    "cpt --output-dir . --overwrite": (_cpt_cwd, "working folder"),
    "cpt --overwrite, --data-files inside the run": (_cpt_data_inside, "input"),
    "cpt into a folder inside the model": (_cpt_inside_model, "input"),
    "cpt --overwrite, a symlinked output folder": (_cpt_symlink, "symlink"),
    "cpt --overwrite into a live run's folder": (_cpt_locked("--overwrite"), "in use"),
    "cpt --resume into a live run's folder": (_cpt_locked("--resume"), "in use"),
    "contrastive --overwrite, a folder of the user's": (
        lambda c: _contrastive(c.encoder, c.text, _user_folder(c.tmp), "--overwrite"), "did not write"),
    "contrastive --overwrite, our output plus a user file": (
        lambda c: _contrastive(c.encoder, c.text, _with_user_file(_copy(c.contrastive_out, c.tmp / "emb")),
                               "--overwrite"), "'thesis.tex'"),
    "contrastive RUN --output-dir RUN --overwrite": (_contrastive_over_its_run, "input"),
    "contrastive --output-dir . --overwrite": (_contrastive_cwd, "working folder"),
    "contrastive --overwrite, a symlinked output folder": (_contrastive_symlink, "symlink"),
    "contrastive --overwrite while another run is live": (_contrastive_live_work, "in use"),
    "contrastive --resume into a folder holding a user file": (_contrastive_resume_over_user_files, "not empty"),
    "run --overwrite, a folder of the user's": (
        lambda c: ["run", str(c.decoder_dir), "--data-files", str(c.corpus), "--output-dir", str(_user_folder(c.tmp)),
                   "--max-steps", "2", "--eval-profile", "none", "--overwrite"], "did not write"),
}

_NEEDS = ("decoder_dir", "corpus", "text", "cpt_run", "encoder", "contrastive_out")


def _ctx(tmp_path, request) -> Ctx:
    return Ctx(tmp_path, request, **{name: request.getfixturevalue(name) for name in _NEEDS})


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_with_every_user_file_unchanged(case, tmp_path, request, capsys):
    build, message = REFUSED[case]
    argv = build(_ctx(tmp_path, request))
    capsys.readouterr()
    before = _tree(tmp_path)
    code = main(argv)
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and message in errors[0] and "Traceback" not in err, err
    assert _tree(tmp_path) == before


def _convert_over_ours(ctx):
    return ["convert", str(ctx.decoder_dir), str(_copy(ctx.encoder, ctx.tmp / "enc")), "--overwrite",
            "--no-verify"], ctx.tmp / "enc" / "model.safetensors"


def _cpt_over_ours(ctx):
    return (_cpt(ctx.decoder_dir, ctx.corpus, _copy(ctx.cpt_run, ctx.tmp / "run"), "--overwrite"),
        ctx.tmp / "run" / "encoder" / "model.safetensors")


def _cpt_over_a_stale_lock(ctx):
    run = _lock(_copy(ctx.cpt_run, ctx.tmp / "run"), _dead_pid())
    return _cpt(ctx.decoder_dir, ctx.corpus, run, "--overwrite"), run / "encoder" / "model.safetensors"


def _cpt_resume_of_an_older_run(ctx):
    """A run folder from before the marker (no marker, no lock) still resumes, and its encoder is saved again."""
    run = _copy(ctx.cpt_run, ctx.tmp / "run")
    (run / MARKER).unlink(missing_ok=True)
    (run / "encoder" / MARKER).unlink(missing_ok=True)
    return _cpt(ctx.decoder_dir, ctx.corpus, run, "--resume"), run / "encoder" / "model.safetensors"


def _contrastive_over_ours(ctx):
    return (_contrastive(ctx.encoder, ctx.text, _copy(ctx.contrastive_out, ctx.tmp / "emb"), "--overwrite"),
        ctx.tmp / "emb" / "model.safetensors")


def _convert_over_our_export(ctx):
    """An encoder we exported holds export_record.json and onnx/: ours (issue 41: --overwrite refused them)."""
    enc = _copy(ctx.encoder, ctx.tmp / "enc")
    (enc / "export_record.json").write_text('{"onnx": {"variants": {}}}')
    (enc / "onnx").mkdir()
    (enc / "onnx" / "model.onnx").write_bytes(b"graph")
    return ["convert", str(ctx.decoder_dir), str(enc), "--overwrite", "--no-verify"], enc / "model.safetensors"


ALLOWED = {
    "convert --overwrite of our encoder after export": _convert_over_our_export,
    "convert --overwrite of our earlier encoder": _convert_over_ours,
    "cpt --overwrite of our earlier run": _cpt_over_ours,
    "cpt --overwrite takes over a dead run's lock": _cpt_over_a_stale_lock,
    "cpt --resume of a run folder without a marker": _cpt_resume_of_an_older_run,
    "contrastive --overwrite of our earlier output": _contrastive_over_ours,
}


@pytest.mark.parametrize("case", list(ALLOWED))
def test_our_own_earlier_output_is_replaced(case, tmp_path, request):
    argv, written = ALLOWED[case](_ctx(tmp_path, request))
    assert main(argv) == 0
    assert written.is_file()
    assert not any(p.name == LOCK for p in tmp_path.rglob("*")), "the lock goes when the run ends"
