"""push-space's README front matter and requirements.txt, sized to the models the Space loads: `suggested_hardware`,
`startup_duration_timeout` and `preload_from_hub` read back with huggingface_hub's SpaceCard, and a torch line that
a CPU Space resolves to PyTorch's CPU wheel (checked with pip's own requirements parser, offline).

A large model is a sparse safetensors file (its size on record, no bytes on disk) in a copy of the tiny run.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import pytest
from hub_server import fake_hub  # noqa: F401 (a fixture)

pytest.importorskip("gradio", reason="the Space needs gradio: pip install 'hf-encoderize[space]'")

from hf_encoderize.publish.space_card import (  # noqa: E402
    CPU_INDEX,
    GIB,
    HARDWARE,
    preload_entries,
    suggest_hardware,
    weight_bytes,
)

pytestmark = pytest.mark.filterwarnings("ignore:.*(no_silent_downcasting|copy keyword).*")

HUB_ARGS = ("--model-id", "someone/tiny-encoder", "--base-model", "someone/tiny-base")


def _installed(name: str) -> str:
    from importlib.metadata import version

    return version(name).split("+")[0]


def _push(hub, run, *args):
    """push-space `run` to the fake Hub; (its README's card data, its requirements.txt lines)."""
    from huggingface_hub import SpaceCard, SpaceCardData

    from hf_encoderize.cli import main

    assert main(["push-space", str(run), "someone/demo", *args]) == 0
    files = hub.files("someone/demo")
    card = SpaceCard(files["README.md"].decode())
    assert isinstance(card.data, SpaceCardData)
    assert SpaceCard(str(card)).data.to_dict() == card.data.to_dict()  # it round-trips through huggingface_hub
    return card.data, files["requirements.txt"].decode().splitlines()


def _valid_front_matter(data) -> None:
    """What the Hub's Spaces configuration reference asks of the three fields."""
    from huggingface_hub import SpaceHardware
    from huggingface_hub.utils import validate_repo_id

    assert data.sdk == "gradio" and data.suggested_hardware in {flavor.value for flavor in SpaceHardware}
    assert re.fullmatch(r"\d+[smh]", data.startup_duration_timeout)
    for entry in data.to_dict().get("preload_from_hub", []):
        repo, *files = entry.split(" ")  # "repo", or "repo file1,file2"
        validate_repo_id(repo)
        assert len(files) <= 1


def _torch_requirement(lines: list[str]):
    from packaging.requirements import Requirement

    (line,) = [line for line in lines if re.match(r"torch\b", line)]
    return Requirement(line)


def _large_run(tmp_path, tiny_run, gib: float):
    """A copy of the tiny run whose encoder has `gib` GiB more weights (a sparse file: nothing written)."""
    run = shutil.copytree(tiny_run, tmp_path / "large")
    with open(run / "encoder" / "model-00002-of-00002.safetensors", "wb") as handle:
        handle.truncate(int(gib * GIB))
    return run


def test_small_model_front_matter_validates_and_preloads_its_hub_repos(fake_hub, tiny_run):  # noqa: F811
    data, lines = _push(fake_hub, tiny_run, *HUB_ARGS)
    _valid_front_matter(data)
    assert (data.suggested_hardware, data.startup_duration_timeout) == ("cpu-basic", "30m")
    assert data.preload_from_hub == ["someone/tiny-encoder", "someone/tiny-base"]  # both downloaded at build time
    assert data.models == ["someone/tiny-encoder", "someone/tiny-base"]


def test_cpu_space_gets_the_cpu_torch_wheel(fake_hub, tiny_run, tmp_path):  # noqa: F811
    from packaging.version import Version

    _, lines = _push(fake_hub, tiny_run, *HUB_ARGS)
    assert f"--extra-index-url {CPU_INDEX}" in lines
    torch = _torch_requirement(lines).specifier
    assert torch.contains(Version(f"{_installed('torch')}+cpu"))
    assert not torch.contains(Version(_installed("torch")))  # PyPI's (CUDA) wheel does not satisfy it
    assert {f"{name}=={_installed(name)}" for name in ("transformers", "sentence-transformers")} <= set(lines)
    # pip reads the file as a Space's build does: the option line and every pin parse before anything resolves
    # (--no-index, --ignore-installed: nothing is fetched, so pip's one complaint is that it found no distribution).
    (tmp_path / "requirements.txt").write_text("\n".join(lines) + "\n")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--dry-run", "--no-deps", "--no-index",
                          "--ignore-installed", "-r", str(tmp_path / "requirements.txt")],
                         capture_output=True, text=True, timeout=120)
    assert "Could not find a version that satisfies the requirement" in pip.stderr, pip.stderr[-2000:]
    assert not re.search(r"Invalid requirement|no such option|unrecognized", pip.stderr, re.I), pip.stderr[-2000:]


def test_larger_models_get_larger_hardware_and_gpu_torch(fake_hub, tiny_run, tmp_path):  # noqa: F811
    # 3 GiB more: encoder, embedding (the encoder, loaded again by sentence-transformers) and base ~ 9 GiB: CPU upgrade
    data, lines = _push(fake_hub, _large_run(tmp_path / "a", tiny_run, 3), *HUB_ARGS)
    _valid_front_matter(data)
    assert (data.suggested_hardware, data.startup_duration_timeout) == ("cpu-upgrade", "1h")
    assert _torch_requirement(lines).specifier.contains(f"{_installed('torch')}+cpu")
    # 7 GiB more: ~ 21 GiB, beyond a 24 GB GPU with room to spare: the 80 GB one, and PyPI's CUDA wheel
    data, lines = _push(fake_hub, _large_run(tmp_path / "b", tiny_run, 7), *HUB_ARGS)
    _valid_front_matter(data)
    assert (data.suggested_hardware, data.startup_duration_timeout) == ("a100-large", "2h")
    assert str(_torch_requirement(lines).specifier) == f"=={_installed('torch')}"
    assert not any(line.startswith("--") for line in lines)


def test_bundled_models_need_no_preload(fake_hub, tiny_run):  # noqa: F811
    data, _ = _push(fake_hub, tiny_run)  # the encoder goes into the Space repo; the recorded base is a local path
    _valid_front_matter(data)
    assert "preload_from_hub" not in data.to_dict() and data.suggested_hardware == "cpu-basic"


def test_preload_entries_and_hardware_rows(tiny_run):
    assert preload_entries(["a/enc", None, "a/enc"], {"base_model": "b/base", "base_gguf_file": "q8.gguf"}) == [
        "a/enc", "b/base q8.gguf"]  # a GGUF base: its one file
    assert preload_entries([None], {"base_model": "b/base", "base_revision": "v2"}) == []  # pinned: cannot preload
    assert [suggest_hardware(row.up_to_gib * GIB).flavor for row in HARDWARE] == [row.flavor for row in HARDWARE]
    assert suggest_hardware(6 * GIB + 1).flavor == "cpu-upgrade" and suggest_hardware(10**15) == HARDWARE[-1]
    encoder = tiny_run / "encoder"
    assert weight_bytes(encoder) == sum(path.stat().st_size for path in encoder.glob("*.safetensors")) > 0
