"""Issue 30, "Security (5)" and SIGTERM: one table per class, a case per row.

Every row asserts the exit code, one `error:` (or note) line, no traceback, and, through the fake Hub on 127.0.0.1
(tests/hub_server.py), exactly what was or was not uploaded. The user's files stay byte for byte as they were.
- push: a symlink that leaves the folder is refused (never followed); local paths are stripped from the staged copy;
  credentials in HF_ENDPOINT are never printed.
- folder code: a `modules.json` naming a module in the folder never runs without --trust-remote-code (contrastive,
  eval --mteb, the Space's embedding tabs).
- SIGTERM during cpt: exit 143, one line naming the newest checkpoint and --resume.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import write_corpus
from hub_server import fake_hub, make_run_folder  # noqa: F401 (fake_hub is a fixture)

from hf_encoderize.cli import main
from hf_encoderize.common.outputs import add_to_marker

SECRET = "AWS_SECRET_ACCESS_KEY=do-not-upload-me"


def snapshot(folder: Path) -> dict:
    """Every file (links as their target text, so a link is not read through) with its bytes."""
    return {str(p.relative_to(folder)): (os.readlink(p) if p.is_symlink() else p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_symlink() or p.is_file()}


def one_error(err: str, *needles: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err, err
    errors = [line for line in lines if line.startswith("error: ")]
    assert len(errors) == 1, err
    assert all(needle in errors[0] for needle in needles), errors[0]
    return errors[0]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = make_run_folder(tmp_path_factory.mktemp("security"))
    assert main(["card", str(out)]) == 0
    return out


@pytest.fixture
def run_copy(run_dir, tmp_path):
    """A fresh copy of the run folder per row (rows add links and files to it)."""
    out = tmp_path / "run"
    shutil.copytree(run_dir, out, symlinks=True)
    (tmp_path / ".env").write_text(SECRET + "\n")  # beside the run, where a user keeps credentials
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "id_rsa").write_text(SECRET + "\n")
    return out


# ------------------------------------------------------------------------------------------------ symlinks


def _link_file_out(out: Path) -> str:
    (out / "encoder" / "notes.txt").symlink_to(out.parent / ".env")
    return "notes.txt"


def _link_folder_out(out: Path) -> str:
    (out / "encoder" / "extra").symlink_to(out.parent / "private", target_is_directory=True)
    return "extra"


def _relative_link_out(out: Path) -> str:
    (out / "encoder" / "vocab.txt").symlink_to(Path("..") / ".." / ".env")
    return "vocab.txt"


def _link_plot_out(out: Path) -> str:  # an extra pushed beside the encoder: the run's loss curve
    (out / "loss_curve.png").unlink()
    (out / "loss_curve.png").symlink_to(out.parent / ".env")
    return "loss_curve.png"


SYMLINK_ROWS = {
    "file link to ../.env": _link_file_out,
    "folder link out of the encoder": _link_folder_out,
    "relative link climbing out": _relative_link_out,
    "run plot linked out": _link_plot_out,
}


@pytest.mark.parametrize("make_link", SYMLINK_ROWS.values(), ids=SYMLINK_ROWS.keys())
def test_a_symlink_leaving_the_folder_refuses_the_push(make_link, fake_hub, run_copy, capsys):  # noqa: F811
    name = make_link(run_copy)
    before = snapshot(run_copy)
    assert main(["push", str(run_copy), "someone/linked"]) == 2
    captured = capsys.readouterr()
    one_error(captured.err, name, "symlink")
    assert SECRET not in captured.out + captured.err
    assert fake_hub.repos == {} and fake_hub.requests == []  # refused before contacting the Hub
    assert snapshot(run_copy) == before


def test_a_symlink_inside_the_folder_uploads_its_file(fake_hub, run_copy, capsys):  # noqa: F811
    (run_copy / "encoder" / "alias.json").symlink_to("tokenizer_config.json")
    add_to_marker(run_copy / "encoder", ["alias.json"])  # recorded as ours: push uploads only what was recorded
    assert main(["push", str(run_copy), "someone/inside"]) == 0, capsys.readouterr().err
    uploaded = fake_hub.files("someone/inside")
    assert uploaded["alias.json"] == (run_copy / "encoder" / "tokenizer_config.json").read_bytes()


# ------------------------------------------------------------------------------------------------ local paths


def _base_model_path(out: Path) -> tuple[str, str, str]:
    return "config.json", "hf_encoderize.base_model", str(out.parent / "base")


def _contrastive_record(out: Path) -> tuple[str, str, str]:
    local = str(out.parent / "home" / "me" / "corpus.jsonl")
    record = {"source": str(out / "encoder"), "config": {"data_files": local, "dataset": None, "steps": 3},
              "stage": {"objective": "simcse", "pooling": "mean", "loss": "mnrl", "steps": 3, "batch_size": 8,
                        "learning_rate": 3e-5, "scale": 20.0, "training_dropout": {}, "rows": 48, "final_loss": 1.0,
                        "lora": None, "processes": 1, "lead": ""},
              "losses": [1.0], "facts": {"metrics": [], "base_encoder": {}}}
    (out / "encoder" / "contrastive_run.json").write_text(json.dumps(record, indent=2) + "\n")
    add_to_marker(out / "encoder", ["contrastive_run.json"])  # as the contrastive stage's save records it
    return "contrastive_run.json", "config.data_files", local


def _home_relative(out: Path) -> tuple[str, str, str]:
    path = out / "encoder" / "config.json"
    config = json.loads(path.read_text())
    config["hf_encoderize"]["base_model"] = "~/models/my-private-decoder"
    path.write_text(json.dumps(config, indent=2) + "\n")
    return "config.json", "hf_encoderize.base_model", "~/models/my-private-decoder"


def _relative_data_path(out: Path) -> tuple[str, str, str]:
    """`--data-files corpora/mine.jsonl` is recorded as given; from where push runs it need not exist (issue 41)."""
    _contrastive_record(out)
    record = json.loads((out / "encoder" / "contrastive_run.json").read_text())
    record["config"]["data_files"] = "corpora/mine.jsonl"
    (out / "encoder" / "contrastive_run.json").write_text(json.dumps(record, indent=2) + "\n")
    return "contrastive_run.json", "config.data_files", "corpora/mine.jsonl"


PATH_ROWS = {"base model path in config.json": _base_model_path,
             "relative data path in contrastive_run.json": _relative_data_path,
             "data path in contrastive_run.json": _contrastive_record,
             "home-relative base model": _home_relative}


@pytest.mark.parametrize("plant", PATH_ROWS.values(), ids=PATH_ROWS.keys())
def test_local_paths_are_stripped_from_the_upload(plant, fake_hub, run_copy, capsys):  # noqa: F811
    file, field, local = plant(run_copy)
    before = snapshot(run_copy)
    assert main(["push", str(run_copy), "someone/paths"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    uploaded = fake_hub.files("someone/paths")
    assert file in uploaded
    here = str(run_copy.parent).encode()
    leaks = [name for name, content in uploaded.items()
             if (name.endswith((".json", ".md")) and local.encode() in content) or here in content]
    assert not leaks, leaks  # the card (README.md) names the base model too
    value = json.loads(uploaded[file])
    for key in field.split("."):
        value = value[key]
    assert value is None
    notes = [line for line in captured.err.splitlines() if "local paths" in line]  # progress notes go to stderr
    assert len(notes) == 1 and f"{file}: {field}" in notes[0], captured.err
    assert snapshot(run_copy) == before  # the user's own files keep their paths


# ------------------------------------------------------------------------------------------------ credentials


def test_an_unreachable_hub_never_echoes_endpoint_credentials(fake_hub, run_copy, monkeypatch, capsys):  # noqa: F811
    from huggingface_hub import constants

    endpoint = "http://alice:hunter2-secret@127.0.0.1:9"  # port 9 (discard): nothing listens
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(constants, "ENDPOINT", endpoint)
    assert main(["push", str(run_copy), "someone/creds"]) == 2
    captured = capsys.readouterr()
    line = one_error(captured.err, "127.0.0.1:9")
    assert "hunter2-secret" not in captured.out + captured.err and "alice:" not in line


def test_the_run_report_masks_endpoint_credentials(run_copy, monkeypatch, capsys):
    from hf_encoderize.common.run_folder import RunFolder
    from hf_encoderize.pipeline.run import report

    monkeypatch.setenv("HF_ENDPOINT", "https://bob:s3cret-pass@hub.example.org")
    RunFolder(run_copy).push_record.write_text(json.dumps({"repo_id": "someone/x"}))
    places = report(run_copy, None, "someone/x", 1.0)["places"]
    printed = capsys.readouterr().out
    assert "s3cret-pass" not in printed and "s3cret-pass" not in places["hub"]
    assert places["hub"].endswith("@hub.example.org/someone/x")


# ------------------------------------------------------------------------------------------------ folder code


def _evil_folder(encoder: Path, root: Path) -> tuple[Path, Path]:
    """An encoder folder whose modules.json names a module of its own that writes `marker` when imported."""
    folder = root / "evil"
    shutil.copytree(encoder, folder)
    marker = root / "folder-code-ran"
    (folder / "evil_module.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n"
                                           "raise SystemExit('folder code ran')\n")
    (folder / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "",
                                                      "type": "evil_module.Evil"}]))
    return folder, marker


def _contrastive(folder: Path, root: Path) -> list[str]:
    data = root / "text.jsonl"
    data.write_text("".join(json.dumps({"text": f"w{i} w{i + 1} w{i + 2}"}) + "\n" for i in range(16)))
    return ["contrastive", str(folder), "--data-files", str(data), "--output-dir", str(root / "out"),
            "--max-steps", "1", "--batch-size", "4", "--max-seq-length", "32"]


def _mteb(folder: Path, root: Path) -> list[str]:
    beir = root / "beir"
    beir.mkdir()
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "d1", "title": "", "text": "w1 w2"}) + "\n")
    (beir / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "w1"}) + "\n")
    (beir / "qrels").mkdir()
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return ["eval", str(folder), "--mteb", str(beir), "--output-dir", str(root / "results")]


FOLDER_CODE_ROWS = {"contrastive": _contrastive, "eval --mteb": _mteb}


@pytest.mark.parametrize("command", FOLDER_CODE_ROWS.values(), ids=FOLDER_CODE_ROWS.keys())
def test_folder_code_never_runs_without_trust(command, run_dir, tmp_path, capsys):
    folder, marker = _evil_folder(run_dir / "encoder", tmp_path)
    before = snapshot(folder)
    try:
        code = main(command(folder, tmp_path))
    except SystemExit as stop:  # the folder's module raised it on import
        code = f"folder code ran: {stop}"
    assert code == 2, code
    one_error(capsys.readouterr().err)
    assert not marker.exists()
    assert snapshot(folder) == before


def test_the_space_embedding_tabs_never_run_folder_code(run_dir, tmp_path):
    pytest.importorskip("gradio", reason="the Space needs gradio: pip install 'hf-encoderize[space]'")
    from hf_encoderize.publish.space import load_app

    folder, marker = _evil_folder(run_dir / "encoder", tmp_path)
    app = load_app()
    models = app.Models(app.Settings(encoder=str(run_dir / "encoder"), embedding_model=str(folder)))
    try:
        models.embedder()
    except SystemExit as stop:
        pytest.fail(f"folder code ran: {stop}")
    except Exception:  # noqa: BLE001 (refusing the folder is the point; the tab shows the reason)
        pass
    assert not marker.exists()


def test_the_floor_is_a_sentence_transformers_that_refuses_folder_code():
    import sentence_transformers
    import tomllib
    from packaging.requirements import Requirement
    from packaging.version import Version

    pyproject = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())
    floors = [Requirement(r).specifier for r in pyproject["project"]["dependencies"]
              if Requirement(r).name == "sentence-transformers"]
    assert floors and not floors[0].contains("5.4.1") and floors[0].contains("6.0.1")
    assert Version(sentence_transformers.__version__) >= Version("6")


# ------------------------------------------------------------------------------------------------ SIGTERM


def _terminated():
    from hf_encoderize.cli import Terminated

    return Terminated()


INTERRUPT_ROWS = {"Ctrl-C": (KeyboardInterrupt, 130, "interrupted"), "SIGTERM": (_terminated, 143, "terminated")}


@pytest.mark.parametrize("raised, code, word", INTERRUPT_ROWS.values(), ids=INTERRUPT_ROWS.keys())
def test_an_interrupted_contrastive_says_so_once(raised, code, word, run_dir, tmp_path, monkeypatch, capsys):
    from sentence_transformers import SentenceTransformerTrainer

    def interrupt(self, *args, **kwargs):  # where the signal lands: inside the trainer's loop
        raise raised()

    monkeypatch.setattr(SentenceTransformerTrainer, "train", interrupt)
    assert main(_contrastive(run_dir / "encoder", tmp_path)) == code
    line = one_error(capsys.readouterr().err, word, "--resume").replace(str(tmp_path), "TMP")
    assert line.count("interrupted") + line.count("terminated") == 1, line  # issue 30: "interrupted; interrupted"

CPT = """
import sys
from hf_encoderize.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_sigterm_during_cpt_says_where_it_stopped(decoder_dir, tmp_path):
    corpus = write_corpus(tmp_path / "docs.jsonl", 400, lambda i: 6 + i % 12)
    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    args = ["cpt", str(decoder_dir), "--data-files", str(corpus), "--output-dir", str(out), "--max-seq-length", "32",
            "--max-steps", "100000", "--batch-size", "2", "--save-steps", "2", "--eval-steps", "0", "--logging-steps",
            "1000",
            "--eval-documents", "8"]
    process = subprocess.Popen([sys.executable, "-c", CPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, cwd=tmp_path)
    try:
        deadline = time.time() + 240
        while not list((out / "checkpoints").glob("step-*")) and process.poll() is None and time.time() < deadline:
            time.sleep(0.2)
        assert process.poll() is None, process.communicate()[1][-2000:]
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 143, err[-2000:]
    # A save cut by the signal stays a `.partial` folder, never a checkpoint: the line names the newest whole one.
    newest = sorted(path for path in (out / "checkpoints").glob("step-*") if path.suffix != ".partial")[-1]
    line = one_error(err, "--resume").replace(str(tmp_path), "TMP")
    assert line.count("interrupted") + line.count("terminated") == 1, line  # said once, not twice
    assert newest.name in line  # the newest whole checkpoint is named


LAUNCH_ROWS = {"rank 0 says it": ({"WORLD_SIZE": "2", "RANK": "0"}, 1), "rank 1 stays quiet": ({"WORLD_SIZE": "2",
                                                                                            "RANK": "1"}, 0)}


@pytest.mark.parametrize("environ, lines", LAUNCH_ROWS.values(), ids=LAUNCH_ROWS.keys())
def test_a_launched_run_says_it_was_interrupted_once(environ, lines, monkeypatch, capsys):
    """torchrun / accelerate launch pass Ctrl-C or SIGTERM to every process; only the main one prints the line."""
    import hf_encoderize.cli as cli

    def interrupted(*args):
        raise KeyboardInterrupt("the newest checkpoint is 'run/checkpoints/step-0000004'; run the same command with "
                                "--resume to continue from it")

    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(cli, "run_command", interrupted)
    assert main(["doctor"]) == 130
    err = capsys.readouterr().err
    assert len([line for line in err.splitlines() if line.startswith("error: interrupted")]) == lines, err
    assert "Traceback" not in err
