"""The Space's Fill-mask runs an encoder's modeling_encoderize.py only when it is the file hf-encoderize writes.

An edited file (one byte more is enough) turns fill-mask off with a one-sentence reason and its code never runs: the
edits below write a marker file at import time, and the marker must not exist after the app has loaded the folder and
answered every tab. `--trust-remote-code` / ENCODER_TRUST_REMOTE_CODE=1 runs it (the marker appears). A Hub id is
checked the same way through a pre-filled, offline Hub cache. The digest the app trusts must be the template's.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from conftest import make_decoder, make_tokenizer

gr = pytest.importorskip("gradio", reason="the Space needs gradio: pip install 'hf-encoderize[space]'")

from hf_encoderize.model.saving import MODELING_FILE, modeling_source  # noqa: E402
from hf_encoderize.publish.space import SpaceConfig, app_settings, load_app  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")

TEMPLATE = Path(__file__).resolve().parent.parent / "hf_encoderize" / "model" / "remote_code" / MODELING_FILE
OFF = "differs from the one hf-encoderize ships, so fill-mask is off"


@pytest.fixture(scope="module")
def app():
    return load_app()


@pytest.fixture(scope="module")
def encoder(tmp_path_factory, decoder_dir):
    """A tiny Llama encoder as `save_encoder` writes it, its base decoder recorded (so Compare works too)."""
    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.saving import save_encoder

    model, tokenizer = make_decoder(), make_tokenizer()
    report = encoderize(model, tokenizer)
    out = tmp_path_factory.mktemp("trust") / "shipped-encoder"
    return save_encoder(model, tokenizer, out, metadata={**report.to_dict(), "base_model": str(decoder_dir)})


def edited(encoder: Path, folder: Path, marker: Path | None = None) -> Path:
    """A copy of `encoder` whose modeling file has one more byte, or (with `marker`) a line that writes `marker`."""
    copy = shutil.copytree(encoder, folder)
    extra = f"open({str(marker)!r}, 'w').close()\n" if marker else "\n"
    with open(copy / MODELING_FILE, "a") as handle:
        handle.write(extra)
    config = json.loads((copy / "config.json").read_text())  # tempt the embeddings path as well
    config["auto_map"]["AutoModel"] = "modeling_encoderize.EncoderModel"
    (copy / "config.json").write_text(json.dumps(config))
    return copy


def tab(demo, elem_id: str):
    return next(block for block in demo.blocks.values() if getattr(block, "elem_id", None) == elem_id)


def test_trusted_digest_is_the_shipped_template(app):
    digest = hashlib.sha256(TEMPLATE.read_bytes()).hexdigest()
    assert digest in app.TRUSTED_MODELING_SHA256, (
        f"{TEMPLATE.name} changed: put its SHA-256 {digest} "
        " in TRUSTED_MODELING_SHA256 in space/space_models.py")
    for model_type in ("llama", "gpt_neox", "qwen3_moe", "xlm-roberta"):  # what saving.py writes, for any model
        assert app.modeling_sha256(modeling_source(model_type).encode()) == digest
    smuggled = modeling_source("llama").replace("MODEL_TYPE = 'llama'", "MODEL_TYPE = 'llama'; import os")
    assert app.modeling_sha256(smuggled.encode()) != digest  # only the bare literal is put back


def test_shipped_file_turns_fill_mask_on(app, encoder):
    space = app.EncoderSpace(app.Models(app.Settings(encoder=str(encoder))))
    assert space.models.mlm == "remote" and "byte for byte the file hf-encoderize ships" in space.models.mlm_note
    assert len(space.fill_mask("w1 w2 [MASK] w4", 3)) == 3
    demo = app.build_demo(app.Settings(encoder=str(encoder)))
    assert "byte for byte" in tab(demo, "mask-note").value and tab(demo, "mask-button").interactive


def test_one_byte_more_turns_fill_mask_off_and_says_why(app, encoder, tmp_path):
    folder = edited(encoder, tmp_path / "one-byte-more")
    space = app.EncoderSpace(app.Models(app.Settings(encoder=str(folder))))
    assert space.models.mlm is None and OFF in space.models.mlm_note and "--trust-remote-code" in space.models.mlm_note
    with pytest.raises(gr.Error, match=OFF):
        space.fill_mask("w1 w2 [MASK] w4", 3)
    demo = app.build_demo(app.Settings(encoder=str(folder)))
    assert OFF in tab(demo, "mask-note").value and tab(demo, "mask-button").interactive is False


def test_edited_code_never_runs(app, encoder, tmp_path):
    marker = tmp_path / "remote-code-ran"
    folder = edited(encoder, tmp_path / "edited-never-runs", marker)
    settings = app.Settings(encoder=str(folder))
    app.build_demo(settings)
    space = app.EncoderSpace(app.Models(settings))
    with pytest.raises(gr.Error, match=OFF):
        space.fill_mask("w1 w2 [MASK] w4", 3)
    space.similarity("w1 w2 w3\nw4 w5")  # embeddings and Compare load the folder without its code
    space.search("w1 w2\nw3 w4", "w1")
    space.compare("w1 w2 w3\nw4 w5")
    assert not marker.exists()


def test_file_edited_after_start_is_checked_again(app, encoder, tmp_path):
    marker = tmp_path / "remote-code-ran"
    folder = shutil.copytree(encoder, tmp_path / "edited-later")
    space = app.EncoderSpace(app.Models(app.Settings(encoder=str(folder))))
    assert space.models.mlm == "remote"
    with open(folder / MODELING_FILE, "a") as handle:
        handle.write(f"open({str(marker)!r}, 'w').close()\n")
    with pytest.raises(gr.Error, match=OFF):
        space.fill_mask("w1 w2 [MASK] w4", 3)
    assert not marker.exists()


def test_opt_in_runs_the_edited_file(app, encoder, tmp_path, monkeypatch):
    marker = tmp_path / "remote-code-ran"
    folder = edited(encoder, tmp_path / "edited-opt-in", marker)
    settings = app_settings(SpaceConfig(str(folder), trust_remote_code=True))  # `hf-encoderize space --trust-...`
    space = app.EncoderSpace(app.Models(settings))
    assert space.models.mlm == "remote" and "you trusted it" in space.models.mlm_note
    assert len(space.fill_mask("w1 w2 [MASK] w4", 3)) == 3
    assert marker.exists()
    monkeypatch.setenv("ENCODER_MODEL", str(folder))
    monkeypatch.setenv("ENCODER_TRUST_REMOTE_CODE", "1")  # the same switch for the app on its own, e.g. on the Hub
    assert app.settings_from_env().trust_remote_code
    monkeypatch.delenv("ENCODER_TRUST_REMOTE_CODE")
    assert not app.settings_from_env().trust_remote_code
    assert not app_settings(SpaceConfig(str(folder))).trust_remote_code  # off unless asked for


def test_space_help_offers_the_opt_in():
    from hf_encoderize.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    assert "--trust-remote-code" in commands["space"].format_help()


# ------------------------------------------------------------------------------------------------ Hub ids


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """An offline Hub cache (the layout huggingface_hub writes) that `cache(repo_id, folder)` fills."""
    from huggingface_hub import constants

    root = tmp_path / "hub-cache"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(root))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    def cache(repo_id: str, folder: Path) -> None:
        commit = hashlib.sha1(repo_id.encode()).hexdigest()
        repo = root / f"models--{repo_id.replace('/', '--')}"
        shutil.copytree(folder, repo / "snapshots" / commit)
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(commit)

    return cache


def test_hub_ids_are_checked_too(app, encoder, tmp_path, hub_cache):
    marker = tmp_path / "remote-code-ran"
    hub_cache("someone/shipped", encoder)
    hub_cache("someone/edited", edited(encoder, tmp_path / "edited", marker))
    missing = shutil.copytree(encoder, tmp_path / "missing")
    (missing / MODELING_FILE).unlink()
    hub_cache("someone/missing", missing)  # not in the cache, and offline: it cannot be checked

    shipped = app.EncoderSpace(app.Models(app.Settings(encoder="someone/shipped")))
    assert shipped.models.mlm == "remote" and len(shipped.fill_mask("w1 w2 [MASK] w4", 3)) == 3
    edited_space = app.EncoderSpace(app.Models(app.Settings(encoder="someone/edited")))
    with pytest.raises(gr.Error, match=OFF):
        edited_space.fill_mask("w1 w2 [MASK] w4", 3)
    assert not marker.exists()
    models = app.Models(app.Settings(encoder="someone/missing"))
    assert models.mlm is None and models.mlm_note.startswith(f"Could not read {MODELING_FILE} of someone/missing")
