"""`run` (cpt -> eval -> card -> push, resumable) and `--push-to-hub` on cpt, on a tiny decoder with a fake Hub."""

import json

import pytest
from hub_server import fake_hub  # noqa: F401 (fixture)

from hf_encoderize.card import CARD_MARKER
from hf_encoderize.cli import main

TINY = ["--seq-len", "32", "--batch-size", "4", "--eval-documents", "8", "--save-every", "2", "--no-progress",
        "--log-every", "100"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": " ".join(f"w{(7 * d + i) % 120}" for i in range(6 + d % 20))}) + "\n"
                            for d in range(200)))
    return path


def test_cpt_push_to_hub_pushes_card_and_encoder(decoder_dir, corpus, tmp_path, fake_hub):  # noqa: F811
    out = tmp_path / "cpt"
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--steps", "2", "--output-dir", str(out), *TINY,
                 "--push-to-hub", "someone/cpt-encoder", "--hub-private", "--hub-commit-message", "CPT done"])
    assert code == 0
    repo = fake_hub.repos["someone/cpt-encoder"]
    assert repo["private"] is True and [c["message"] for c in repo["commits"]] == ["CPT done"]
    files = fake_hub.files("someone/cpt-encoder")
    assert {"README.md", "model.safetensors", "config.json", "plots/loss_curve.png"} <= set(files)
    assert not any(name.startswith("checkpoints") for name in files)
    record = json.loads((out / "run_record.json").read_text())
    card = files["README.md"].decode()
    assert f"{record['steps']} optimizer steps, {record['tokens_seen']:,} tokens seen" in card
    assert CARD_MARKER in (out / "encoder" / "README.md").read_text()  # the local card is written too


def test_push_to_hub_without_token_fails_before_training(decoder_dir, corpus, tmp_path, fake_hub, monkeypatch,  # noqa: F811
                                                         capsys):
    monkeypatch.delenv("HF_TOKEN")
    out = tmp_path / "never"
    code = main(["cpt", str(decoder_dir), "--data-files", str(corpus), "--steps", "2", "--output-dir", str(out), *TINY,
                 "--push-to-hub", "someone/x"])
    assert code == 2 and "needs a Hub token" in capsys.readouterr().err
    assert not out.exists() and fake_hub.requests == []
