"""The Space's API as a client reads it: `/embed` returns sentence-transformers' own vectors, every endpoint and output
has a name, a client built from the schema's declared types works on every embedding endpoint, and `space --share`
replaces Gradio's "set `share=True` in `launch()`" hint, which a CLI user cannot follow.

Servers run on 127.0.0.1 only; the public link is Gradio's tunnel replaced by a stand-in (no network here).
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import pytest
import torch
from test_space import read_lines, wait_for_line, wait_for_page

pytest.importorskip("gradio", reason="the Space needs gradio: pip install 'hf-encoderize[space]'")

from hf_encoderize.common.errors import EncoderizeError  # noqa: E402
from hf_encoderize.publish.space import SpaceConfig, launch_space  # noqa: E402

# gradio's queue calls pandas APIs that pandas 3 deprecates; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")

TEXTS = ["w1 w2 w3", "w4 w5 w6 w7", "w1 w2 w8 w9 w10"]
ENDPOINTS = {"/similarity", "/search", "/embed", "/fill_mask", "/compare"}
EMBEDDING_ENDPOINTS = ("/similarity", "/search", "/embed", "/compare")  # the ones with a size picker


def _client(url):
    from gradio_client import Client

    return Client(url, verbose=False)


@pytest.fixture(scope="module")
def matryoshka_url(matryoshka_run):
    demo, url = launch_space(SpaceConfig(str(matryoshka_run), port=0), block=False)
    yield url
    demo.close()


def _encode(folder, texts, truncate_dim=None) -> torch.Tensor:
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_tensor=True,
                                                                truncate_dim=truncate_dim)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------------------------------------------ /embed


def test_cli_space_answers_embed_with_sentence_transformers_vectors(tiny_run):
    """`hf-encoderize space RUN` in its own process, asked through gradio_client as a user would."""
    port = _free_port()
    command = [sys.executable, "-m", "hf_encoderize.cli", "space", str(tiny_run), "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = read_lines(server)
    try:
        wait_for_page(f"http://127.0.0.1:{port}/config", server, seconds=120)
        result = _client(f"http://127.0.0.1:{port}/").predict("\n".join(TEXTS), api_name="/embed")
        wait_for_line(lines, "Serving the encoder demo at", seconds=60)  # printed once launch() has returned
    finally:
        server.terminate()
        server.wait(timeout=30)
    output = "".join(lines)
    expected = _encode(tiny_run / "encoder", TEXTS)  # (3, 32)
    assert torch.tensor(result["vectors"]) == pytest.approx(expected, abs=1e-5)
    assert result["texts"] == TEXTS and result["dimension"] == 32 == expected.shape[1]
    assert result["model"] == str(tiny_run / "encoder") and result["pooling"] == "mean"
    assert result["normalized"] is False
    # What the CLI says about a public link is its own flag, not Gradio's advice to edit launch().
    assert "share=True" not in output and "--share" in output, output[-2000:]
    assert f"http://127.0.0.1:{port}" in output


def test_embed_at_a_matryoshka_size_is_encode_with_truncate_dim(matryoshka_url, matryoshka_run):
    client = _client(matryoshka_url)
    full = client.predict("\n".join(TEXTS), api_name="/embed")  # the picker's default: the full vector
    eight = client.predict("\n".join(TEXTS), "8", api_name="/embed")
    model = matryoshka_run / "contrastive"  # the run's embedding model makes the vectors, with its own pooling
    assert torch.tensor(full["vectors"]) == pytest.approx(_encode(model, TEXTS), abs=1e-5)
    assert torch.tensor(eight["vectors"]) == pytest.approx(_encode(model, TEXTS, truncate_dim=8), abs=1e-5)
    assert (full["dimension"], eight["dimension"]) == (32, 8) and eight["model"] == str(model)
    assert eight["pooling"] == "mean"  # the contrastive stage's default pooling, read off the loaded model


# ------------------------------------------------------------------------------------------------ the schema


def test_every_endpoint_and_output_has_a_name(matryoshka_url):
    info = _client(matryoshka_url).view_api(return_format="dict", print_info=False)
    assert set(info["named_endpoints"]) == ENDPOINTS and not info["unnamed_endpoints"]
    for name, endpoint in info["named_endpoints"].items():
        labels = [item["label"] for item in endpoint["parameters"] + endpoint["returns"]]
        assert not [label for label in labels if re.fullmatch(r"value_\d+", label or "")], (name, labels)
        assert endpoint["description"], f"{name} has no description on the API page"


def _schema_calls(endpoint: dict) -> list[dict]:
    """The calls a client generated from the schema makes: each parameter's declared example, and every value of an
    enumerated one (the size picker), each checked against the type the schema declares for it."""
    json_types = {"string": str, "number": (int, float), "integer": int, "boolean": bool}
    base, choices = {}, {}
    for parameter in endpoint["parameters"]:
        declared = parameter["type"]
        values = declared.get("enum") or [parameter["example_input"]]
        assert all(isinstance(value, json_types[declared["type"]]) for value in values), parameter
        base[parameter["parameter_name"]] = values[0]
        if len(values) > 1:
            choices[parameter["parameter_name"]] = values
    return [base] + [{**base, name: value} for name, values in choices.items() for value in values[1:]]


@pytest.mark.parametrize("run_name", ["tiny_run", "matryoshka_run"])
def test_a_client_built_from_the_schema_works_on_every_embedding_endpoint(run_name, request):
    """The picker's values as the schema declares them (strings) are what the server takes: before, the schema said
    Literal['0'] while only the int 0 was accepted, so every generated call failed."""
    run = request.getfixturevalue(run_name)
    demo, url = launch_space(SpaceConfig(str(run), port=0), block=False)
    try:
        client = _client(url)
        info = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
        for name in EMBEDDING_ENDPOINTS:
            calls = _schema_calls(info[name])
            assert len(calls) == (3 if run_name == "matryoshka_run" else 1)  # each trained size is called
            for kwargs in calls:
                client.predict(**kwargs, api_name=name)  # raises AppError if the server refuses it
    finally:
        demo.close()


# ------------------------------------------------------------------------------------------------ --share


def test_share_opens_a_public_link(tiny_run, monkeypatch):
    from gradio import networking

    from hf_encoderize.publish.space import serving_lines

    public = "https://0123456789abcdef.gradio.live"
    opened = []
    monkeypatch.setattr(networking, "setup_tunnel", lambda **kwargs: opened.append(kwargs) or public)
    demo, url = launch_space(SpaceConfig(str(tiny_run), port=0, share=True), block=False)
    try:
        assert demo.share_url == public and opened and opened[0]["local_port"] == int(url.rstrip("/").split(":")[-1])
    finally:
        demo.close()
    assert public in serving_lines(url, public, True)
    assert "Could not create the public link" in serving_lines(url, None, True)  # Gradio's servers out of reach


def test_unreachable_localhost_asks_for_the_flag(tiny_run, monkeypatch):
    from gradio import networking

    monkeypatch.setattr(networking, "url_ok", lambda url: False)  # a notebook host or a proxy in the way
    with pytest.raises(EncoderizeError, match="pass --share"):
        launch_space(SpaceConfig(str(tiny_run), port=0), block=False)


def test_space_help_offers_share(capsys):
    from hf_encoderize.cli import main

    with pytest.raises(SystemExit):
        main(["space", "--help"])
    assert "--share" in capsys.readouterr().out
