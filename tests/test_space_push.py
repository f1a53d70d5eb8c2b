"""`space --push`: the Space uploaded to a local stand-in of the Hub (tests/hub_server.py), pinned to the versions it
was made with, bundling the encoder (and a contrastive embedding model), and the pushed app loading from a clone."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from hub_server import TOKEN, fake_hub, make_run_folder  # noqa: F401 (fake_hub is a fixture)

pytest.importorskip("gradio", reason="the Space needs gradio: pip install 'hf-encoderize[space]'")

from hf_encoderize.common.errors import EncoderizeError  # noqa: E402
from hf_encoderize.publish.space import SPACE_DIR, PushSpaceConfig, push_space  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")


def _installed(name: str) -> str:
    from importlib.metadata import version

    return version(name).split("+")[0]


def test_push_space_with_a_model_id_uploads_the_app_pinned(fake_hub, tiny_run, capsys):  # noqa: F811
    import gradio
    import yaml

    from hf_encoderize.cli import main

    assert main(["push-space", str(tiny_run), "someone/demo", "--model-id", "someone/tiny-encoder",
                 "--base-model", "someone/tiny-base"]) == 0
    repo = fake_hub.repos["someone/demo"]
    assert repo["type"] == "space" and repo["sdk"] == "gradio"
    assert repo["commits"][0]["message"] == "Upload Space with hf-encoderize"
    files = fake_hub.files("someone/demo")
    assert set(files) == {"README.md", "app.py", "space_compute.py", "space_models.py", "requirements.txt",
                          "space_config.json"}
    assert files["app.py"] == (SPACE_DIR / "app.py").read_bytes()
    assert files["space_compute.py"] == (SPACE_DIR / "space_compute.py").read_bytes()  # the app imports it
    meta = yaml.safe_load(files["README.md"].decode().split("---\n")[1])
    assert meta["sdk"] == "gradio" and meta["app_file"] == "app.py" and meta["sdk_version"] == gradio.__version__
    assert meta["models"] == ["someone/tiny-encoder", "someone/tiny-base"]
    pins = files["requirements.txt"].decode().split()
    assert {f"{n}=={_installed(n)}" for n in ("transformers", "sentence-transformers")} <= set(pins)
    assert f"torch=={_installed('torch')}+cpu" in pins  # a tiny model: a CPU Space, PyTorch's CPU wheel
    config = json.loads(files["space_config.json"])
    assert config == {"encoder": "someone/tiny-encoder", "base_model": "someone/tiny-base"}
    assert all(TOKEN.encode() not in content for content in files.values())
    assert "uploaded 6 files to Space someone/demo" in capsys.readouterr().out


def _clone_and_load(files: dict[str, bytes], clone: Path, monkeypatch):
    """The pushed Space as it runs on the Hub: the pushed files alone, app.py imported from there."""
    for name, content in files.items():
        (clone / name).parent.mkdir(parents=True, exist_ok=True)
        (clone / name).write_bytes(content)
    for name in ("ENCODER_MODEL", "EMBEDDING_MODEL", "BASE_MODEL"):
        monkeypatch.delenv(name, raising=False)
    spec = importlib.util.spec_from_file_location("pushed_space_app", clone / "app.py")
    app = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pushed_space_app", app)
    spec.loader.exec_module(app)
    return app


def test_push_space_bundles_the_encoder_and_the_pushed_app_runs(fake_hub, tiny_run, tmp_path, monkeypatch):  # noqa: F811
    run = shutil.copytree(tiny_run, tmp_path / "run")
    (run / "encoder" / "optimizer.pt").write_bytes(b"training state that must stay home")
    listed = push_space(PushSpaceConfig(str(run), "someone/bundled", dry_run=True))
    assert fake_hub.requests == []
    pushed = push_space(PushSpaceConfig(str(run), "someone/bundled"))
    files = fake_hub.files("someone/bundled")
    assert listed == pushed == sorted(files)
    assert {"encoder/config.json", "encoder/model.safetensors", "encoder/modeling_encoderize.py"} <= set(files)
    assert not any("optimizer" in name for name in files)
    config = json.loads(files["space_config.json"])
    assert config == {"encoder": "encoder"}  # the recorded base is a local path: the Space cannot reach it

    clone = tmp_path / "space-clone"  # what the Space runs: the pushed files, nothing else
    app = _clone_and_load(files, clone, monkeypatch)
    space = app.EncoderSpace(app.Models(app.settings_from_env()))
    assert space.models.settings.encoder == str(clone / "encoder")
    assert space.models.settings.base_model == "gone/elsewhere"  # the Hub id in the encoder's own metadata
    _, scores = space.similarity("w1 w2 w3\nw1 w2 w3")
    assert scores["similarity"][0][1] == pytest.approx(1.0, abs=1e-5)


def test_push_space_bundles_the_contrastive_model_too(fake_hub, contrastive_run, tmp_path, monkeypatch):  # noqa: F811
    from sentence_transformers import SentenceTransformer

    push_space(PushSpaceConfig(str(contrastive_run), "someone/both"))
    files = fake_hub.files("someone/both")
    assert {"encoder/modeling_encoderize.py", "contrastive/config.json", "contrastive/modules.json",
            "contrastive/1_Pooling/config.json", "contrastive/model.safetensors"} <= set(files)
    assert json.loads(files["space_config.json"]) == {"encoder": "encoder", "embedding_model": "contrastive"}

    clone = tmp_path / "space-clone"
    app = _clone_and_load(files, clone, monkeypatch)
    space = app.EncoderSpace(app.Models(app.settings_from_env()))
    assert space.models.settings.encoder == str(clone / "encoder")
    assert space.models.settings.embedding_model == str(clone / "contrastive")
    assert space.models.mlm == "remote" and len(space.fill_mask("w1 w2 [MASK] w4", 3)) == 3
    sentences = ["w1 w2 w3", "w4 w5"]
    reference = SentenceTransformer(str(contrastive_run / "contrastive"), device="cpu").encode(sentences)
    assert app.encode(space.models.embedder(), sentences).numpy() == pytest.approx(reference, abs=1e-6)

    monkeypatch.setenv("ENCODER_MODEL", str(contrastive_run / "encoder"))  # another encoder: no stored embeddings
    assert app.settings_from_env().embedding_model is None


def test_pushed_space_offers_the_matryoshka_sizes(fake_hub, matryoshka_run, tmp_path, monkeypatch):  # noqa: F811
    push_space(PushSpaceConfig(str(matryoshka_run), "someone/mrl"))
    files = fake_hub.files("someone/mrl")
    assert "contrastive/contrastive_run.json" in files  # the record the sizes are read from goes with the model
    app = _clone_and_load(files, tmp_path / "space-clone", monkeypatch)
    space = app.EncoderSpace(app.Models(app.settings_from_env()))
    assert space.models.sizes == [("32 (full size)", 0), ("16", 16), ("8", 8)]
    assert "(first 8 of 32 dimensions)" in space.similarity("w1 w2\nw3 w4", 8)[0]


def test_push_space_points_to_a_hub_embedding_model_or_opts_out(fake_hub, contrastive_run):  # noqa: F811
    import yaml

    push_space(PushSpaceConfig(str(contrastive_run), "someone/hub", model_id="someone/enc",
                               embedding_model_id="someone/emb"))
    files = fake_hub.files("someone/hub")
    assert set(files) == {"README.md", "app.py", "space_compute.py", "space_models.py", "requirements.txt",
                          "space_config.json"}
    assert json.loads(files["space_config.json"]) == {"encoder": "someone/enc", "embedding_model": "someone/emb"}
    assert yaml.safe_load(files["README.md"].decode().split("---\n")[1])["models"] == ["someone/enc", "someone/emb"]

    listed = push_space(PushSpaceConfig(str(contrastive_run), "someone/none", embedding_model="encoder", dry_run=True))
    assert "encoder/config.json" in listed and not any(name.startswith("contrastive/") for name in listed)
    with pytest.raises(EncoderizeError, match="drop --embedding-model-id"):
        PushSpaceConfig(str(contrastive_run), "someone/x", embedding_model="encoder", embedding_model_id="someone/e")


def test_push_space_refuses_bad_ids_in_one_line(tiny_run, capsys):
    from hf_encoderize.cli import main

    assert main(["push-space", str(tiny_run), "not a repo"]) == 2
    assert main(["push-space", str(tiny_run), "someone/demo", "--hub-create-pr", "--hub-revision", "dev"]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 2 and all(line.startswith("error: ") for line in errors)
    assert "invalid Hub repo id" in errors[0] and "--hub-create-pr" in errors[1]


# ------------------------------------------------------------------------------------------------ browser
