"""Push through the real huggingface_hub client to a fake Hub on 127.0.0.1: what goes over HTTP, and what never does."""

import json

import pytest
from hub_server import TOKEN, fake_hub, make_run_folder  # noqa: F401 (fake_hub is a fixture)

from hf_encoderize.cli import main
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.publish.card import CARD_MARKER
from hf_encoderize.publish.hub import HubConfig, PushConfig, push, push_after, push_folder

ENCODER_FILES = {"config.json", "model.safetensors", "modeling_encoderize.py", "tokenizer.json",
                 "tokenizer_config.json", "modules.json", "1_Pooling/config.json", "sentence_bert_config.json",
                 "config_sentence_transformers.json", "README.md"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = make_run_folder(tmp_path_factory.mktemp("hub"))
    assert main(["card", str(out)]) == 0
    return out


def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_push_uploads_encoder_card_and_plots_only(fake_hub, run_dir, capsys):  # noqa: F811
    before = snapshot(run_dir)
    code = main(["push", str(run_dir), "someone/tiny-encoder", "--hub-private", "--hub-commit-message",
                 "First encoder"])
    assert code == 0, capsys.readouterr().err
    repo = fake_hub.repos["someone/tiny-encoder"]
    assert repo["private"] is True and repo["type"] == "model"
    assert [c["message"] for c in repo["commits"]] == ["First encoder"]
    uploaded = fake_hub.files("someone/tiny-encoder")
    assert ENCODER_FILES <= set(uploaded)
    assert {"plots/loss_curve.png", "plots/eval/encoder/scores.png"} <= set(uploaded)
    assert not [p for p in uploaded if "checkpoint" in p or "optimizer" in p or p.endswith(".jsonl")]
    assert uploaded["model.safetensors"] == (run_dir / "encoder" / "model.safetensors").read_bytes()
    card = uploaded["README.md"].decode()
    assert CARD_MARKER in card and 'from_pretrained("someone/tiny-encoder")' in card  # re-rendered for the repo
    assert all(TOKEN.encode() not in content for content in uploaded.values())
    assert snapshot(run_dir) == before  # nothing local changed, nothing deleted
    printed = capsys.readouterr().out
    assert f"uploaded {len(uploaded)} files to someone/tiny-encoder" in printed and TOKEN not in printed


def test_dry_run_lists_the_same_set_and_contacts_nothing(fake_hub, run_dir):  # noqa: F811
    listed = push(PushConfig(str(run_dir), "someone/dry", dry_run=True))
    assert fake_hub.requests == []
    pushed = push(PushConfig(str(run_dir), "someone/dry"))
    assert listed == pushed == sorted(fake_hub.files("someone/dry"))


def test_revision_and_pull_request(fake_hub, run_dir):  # noqa: F811
    push(PushConfig(str(run_dir), "someone/branches", revision="experiment"))
    push(PushConfig(str(run_dir), "someone/branches", create_pr=True, commit_message="Try this"))
    commits = fake_hub.repos["someone/branches"]["commits"]
    assert [(c["revision"], c["message"]) for c in commits] == [("experiment", "Upload encoder with hf-encoderize"),
                                                                 ("refs/pr/1", "Try this")]
    assert "experiment" in fake_hub.repos["someone/branches"]["branches"]


def test_a_file_holding_the_token_refuses_the_push(fake_hub, tmp_path):  # noqa: F811
    folder = tmp_path / "space"
    folder.mkdir()
    (folder / "app.py").write_text("print('hi')\n")
    (folder / "notes.txt").write_text(f"my token is {TOKEN}\n")
    with pytest.raises(EncoderizeError, match="'notes.txt' holds your Hub token") as info:
        push_folder(folder, "someone/leaky", repo_type="space", space_sdk="gradio")
    assert TOKEN not in str(info.value)
    assert fake_hub.requests == [] and (folder / "notes.txt").exists()
    with pytest.raises(EncoderizeError, match="holds your Hub token"):
        push_folder(folder, "someone/leaky", extra_files={"cfg.json": json.dumps({"t": TOKEN}).encode()},
                    dry_run=True)


def test_space_push_and_extra_files(fake_hub, tmp_path):  # noqa: F811
    folder = tmp_path / "space"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "state.bin").write_bytes(b"x")
    (folder / "app.py").write_text("import gradio\n")
    (folder / ".env").write_text("SECRET=1\n")
    files = push_folder(folder, "someone/demo", repo_type="space", space_sdk="gradio",
                        extra_files={"README.md": b"---\nsdk: gradio\n---\n"})
    assert files == ["README.md", "app.py"]
    assert fake_hub.repos["someone/demo"]["type"] == "space" and fake_hub.repos["someone/demo"]["sdk"] == "gradio"
    assert set(fake_hub.files("someone/demo")) == {"README.md", "app.py"}


def test_push_after_writes_the_card_then_pushes(fake_hub, tmp_path):  # noqa: F811
    out = make_run_folder(tmp_path)
    files = push_after(out, HubConfig(push_to_hub="someone/after", hub_private=True))
    assert CARD_MARKER in (out / "encoder" / "README.md").read_text()  # local card written too
    assert "README.md" in files and fake_hub.repos["someone/after"]["private"] is True


@pytest.mark.parametrize("repo_id", ["no-namespace", "a/b/c", "bad name/x", "user/x..y", "user/x-"])
def test_invalid_repo_id(repo_id, run_dir, capsys):
    assert main(["push", str(run_dir), repo_id]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid Hub repo id") and err.count("\n") == 1


def test_missing_token_wrong_token_and_offline(fake_hub, run_dir, monkeypatch, capsys):  # noqa: F811
    from huggingface_hub import constants

    before = snapshot(run_dir)
    monkeypatch.delenv("HF_TOKEN")
    assert main(["push", str(run_dir), "someone/x"]) == 2
    assert "no Hub token: run `hf auth login` or set HF_TOKEN" in capsys.readouterr().err
    monkeypatch.setenv("HF_TOKEN", "hf_wrongwrongwrongwrong")
    assert main(["push", str(run_dir), "someone/x"]) == 2
    err = capsys.readouterr().err
    assert "HTTP 401" in err and "hf_wrong" not in err and err.count("error:") == 1  # progress lines may come first
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert main(["push", str(run_dir), "someone/x"]) == 2
    assert "HF_HUB_OFFLINE is set" in capsys.readouterr().err
    assert main(["push", str(run_dir), "someone/x", "--dry-run"]) == 0  # listing needs neither network nor token
    assert snapshot(run_dir) == before and "someone/x" not in fake_hub.repos


def test_unreachable_endpoint(monkeypatch, run_dir):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # discard port: nothing listens
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    with pytest.raises(EncoderizeError, match="cannot reach the Hub at http://127.0.0.1:9"):
        push(PushConfig(str(run_dir), "someone/x"))


def test_hub_config_validation():
    with pytest.raises(EncoderizeError, match="invalid Hub repo id"):
        HubConfig(push_to_hub="nope")
    with pytest.raises(EncoderizeError, match="drop --hub-revision"):
        HubConfig(push_to_hub="a/b", hub_create_pr=True, hub_revision="dev")
    with pytest.raises(EncoderizeError, match="drop --hub-revision"):
        PushConfig(".", "a/b", create_pr=True, revision="dev")
