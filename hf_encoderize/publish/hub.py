"""Push an encoder (or a Space) to the Hugging Face Hub with huggingface_hub: `create_repo(exist_ok=True)` +
`upload_folder`, in one commit.

Design choices:
- The uploaded set is decided file by file, not by the server (`publish.upload_set`: the folder minus training state,
  plus named extras such as the card and plots). It is staged as symlinks in a temporary folder, so `--dry-run` lists
  exactly what a real push sends and nothing is copied.
- Before anything leaves the machine, every staged file is scanned for the Hub token (safetensors: the header, where
  free-form metadata lives); a hit refuses the push and names the file, never the token.
- The token comes from `HF_TOKEN` or the login cache (`hf auth login`), never from the command line, and is never
  printed or written. `HF_ENDPOINT` is read when the push runs, so a private Hub or a test server works.
- Nothing local is modified or deleted: a failed push leaves the folder as it was.
- Local paths in the uploaded JSON are set to null in the staged bytes (`upload_set.strip_local_paths`), and one
  printed line names those fields. A URL we print has its user:password masked (HF_ENDPOINT may carry them).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import KW_ONLY, dataclass, fields
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import is_main_process
from hf_encoderize.common.log import get_logger
from hf_encoderize.common.run_folder import RunFolder
from hf_encoderize.common.validation import check_repo_id
from hf_encoderize.model.saving import encoder_dir
from hf_encoderize.publish.upload_set import files_holding, strip_local_paths, upload_set
from hf_encoderize.records.export_record import read_export_record

log = get_logger(__name__)

REPO_TYPES = ("model", "space", "dataset")


@dataclass
class PushOptions:
    """How a push lands on the Hub: the one owner of these options and their checks. `push` and `push-space` take
    them as these flags (their configs subclass this one and name their repo id fields in `REPO_ID_FIELDS`);
    `--push-to-hub` takes them as `--hub-*` flags (`HubConfig.options`)."""

    REPO_ID_FIELDS = ()  # a subclass's fields holding Hub repo ids, checked before any work (None: not given)

    _: KW_ONLY
    private: bool = False
    """Create the repo (model or Space) as private (only applies when it does not exist yet)."""
    revision: str | None = None
    """Branch to push to (created if missing). Default: main."""
    commit_message: str | None = None
    """Commit message. Default: "Upload encoder with hf-encoderize" ("Upload Space with hf-encoderize" for a Space)."""
    create_pr: bool = False
    """Open a pull request instead of committing to the branch."""
    dry_run: bool = False
    """List what would be uploaded; contact nothing."""

    def __post_init__(self):
        for name in self.REPO_ID_FIELDS:
            if getattr(self, name) is not None:
                check_repo_id(getattr(self, name))
        self.check_target(self.create_pr, self.revision)

    @staticmethod
    def check_target(create_pr: bool, revision: str | None, prefix: str = "--hub-") -> None:
        """A pull request is opened against main, so it takes no branch; `prefix`: how the flags are spelled."""
        if create_pr and revision:
            raise EncoderizeError(f"{prefix}create-pr opens a pull request against main; drop {prefix}revision")

    def push_options(self) -> dict:
        """The options as `push_folder`'s keyword arguments."""
        return {field.name: getattr(self, field.name) for field in fields(PushOptions)}


@dataclass
class HubConfig:
    """Push the result to the Hub when the command finishes (card generated first), like transformers' Trainer."""

    _: KW_ONLY
    push_to_hub: str | None = None
    """Hub repo id (`user/name`) to push the encoder and its card to at the end. Token: HF_TOKEN or `hf auth login`."""
    hub_private: bool = False
    """Create the Hub repo as private (only applies when it does not exist yet)."""
    hub_revision: str | None = None
    """Branch of the Hub repo to push to (created if missing). Default: main."""
    hub_commit_message: str | None = None
    """Commit message of the push."""
    hub_create_pr: bool = False
    """Open a pull request instead of committing to the branch."""

    def __post_init__(self):
        if self.push_to_hub is not None:
            check_repo_id(self.push_to_hub)
        PushOptions.check_target(self.hub_create_pr, self.hub_revision, prefix="--hub-")

    def options(self) -> PushOptions:
        """The `--hub-*` flags as the push options `push` takes."""
        return PushOptions(private=self.hub_private, revision=self.hub_revision,
                           commit_message=self.hub_commit_message, create_pr=self.hub_create_pr)


@dataclass
class PushConfig(PushOptions):
    """What to push where (the push options come from `PushOptions`)."""

    REPO_ID_FIELDS = ("repo_id",)

    output_dir: str
    """A cpt/run output folder (its encoder/ is pushed) or an encoder folder."""
    repo_id: str
    """Hub repo id, `user/name` or `org/name`."""


def check_push_ready(hub: HubConfig) -> None:
    """With --push-to-hub, fail before hours of training rather than after: offline mode or no token."""
    if hub.push_to_hub:
        _endpoint_or_refuse()
        if not _saved_token():
            raise EncoderizeError("--push-to-hub needs a Hub token: run `hf auth login` or set HF_TOKEN first")


def mask_credentials(text: str) -> str:
    """`text` with the user:password of every URL in it masked (`http://***@host`): HF_ENDPOINT may carry them."""
    return re.sub(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/\s@]+@", r"\1***@", text)


def push_folder(folder, repo_id: str, *, repo_type: str = "model", private: bool = False, revision: str | None = None,
                commit_message: str | None = None, create_pr: bool = False, token: str | None = None,
                dry_run: bool = False, space_sdk: str | None = None, extra_files: dict | None = None) -> list[str]:
    """Upload `folder` (minus training state) plus `extra_files` ({repo path: local path or bytes}) to `repo_id`.

    Returns the repo paths uploaded (or, with `dry_run`, that would be). One-line `EncoderizeError`s for a bad repo
    id, no token, offline mode, a file holding the token, or a refusal from the Hub.
    """
    check_repo_id(repo_id)
    if repo_type not in REPO_TYPES:
        raise EncoderizeError(f"repo type {repo_type!r} is not one of {', '.join(REPO_TYPES)}")
    if create_pr and revision:
        raise EncoderizeError("a pull request is opened against main; drop the revision or create_pr")
    files, stripped = strip_local_paths(upload_set(folder, extra_files))
    if stripped:
        log.info(f"local paths left out of the upload (JSON fields set to null): {', '.join(stripped)}")
    token = token or _saved_token()
    if token and len(token) >= 8 and (leaks := files_holding(files, token)):
        raise EncoderizeError(f"{leaks[0]!r} holds your Hub token; remove it from the file before pushing")
    if dry_run:
        return sorted(files)
    endpoint = _endpoint_or_refuse()
    if not token:
        raise EncoderizeError("no Hub token: run `hf auth login` or set HF_TOKEN to a token with write access")
    from huggingface_hub import HfApi

    api = HfApi(endpoint=endpoint, token=token)
    with _hub_errors(repo_id, endpoint):
        repo_id = api.create_repo(repo_id, repo_type=repo_type, private=private, exist_ok=True,
                                  space_sdk=space_sdk).repo_id
        if revision and revision != "main":
            api.create_branch(repo_id, branch=revision, repo_type=repo_type, exist_ok=True)
        with _staged(files) as stage:
            api.upload_folder(repo_id=repo_id, folder_path=stage, repo_type=repo_type, revision=revision,
                              create_pr=create_pr or None,
                              commit_message=commit_message or "Upload encoder with hf-encoderize")
    return sorted(files)


def _saved_token() -> str | None:
    from huggingface_hub import get_token

    return get_token()


def _endpoint_or_refuse() -> str:
    from huggingface_hub import constants

    if constants.is_offline_mode():
        raise EncoderizeError("HF_HUB_OFFLINE is set, so nothing can be pushed; unset it (or use --dry-run)")
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


class _staged:
    """A temporary folder of symlinks (copies where symlinks are not allowed) laid out as the repo will be."""

    def __init__(self, files: dict[str, Path | bytes]):
        self.files = files

    def __enter__(self) -> Path:
        self.root = Path(tempfile.mkdtemp(prefix="hf-encoderize-push-"))
        for repo_path, value in self.files.items():
            target = self.root / repo_path
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(value, bytes):
                target.write_bytes(value)
                continue
            try:
                target.symlink_to(Path(value).resolve())
            except OSError:
                shutil.copy2(value, target)
        return self.root

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.root, ignore_errors=True)  # symlinks only: the user's files stay where they are


class _hub_errors:
    """Turn huggingface_hub / network failures into one `EncoderizeError` line (never echoing the token)."""

    def __init__(self, repo_id: str, endpoint: str):
        self.repo_id, self.endpoint = repo_id, endpoint

    def __enter__(self):
        return self

    def __exit__(self, kind, err, tb) -> bool:
        if err is None or isinstance(err, EncoderizeError):
            return False
        from huggingface_hub.errors import HfHubHTTPError

        if isinstance(err, HfHubHTTPError) and err.response is not None:
            status = err.response.status_code
            advice = {401: "the Hub rejected the token: run `hf auth login` or set HF_TOKEN to a valid token",
                      403: f"the token cannot write to {self.repo_id!r}: use a write token with access to it",
                      404: f"{self.repo_id!r} not found: check the repo id and revision"}.get(status)
            message = advice or mask_credentials(str(err).splitlines()[0])
            raise EncoderizeError(f"push to {self.repo_id} failed (HTTP {status}): {message}") from None
        if isinstance(err, (OSError, ConnectionError)) or type(err).__module__.startswith(("httpx", "httpcore")):
            raise EncoderizeError(f"cannot reach the Hub at {mask_credentials(self.endpoint)}: check the network or "
                                  "HF_ENDPOINT") from None
        if isinstance(err, ValueError):
            first_line = mask_credentials(str(err).splitlines()[0])
            raise EncoderizeError(f"push to {self.repo_id} refused: {first_line}") from None
        return False


# ------------------------------------------------------------------------------------------------ encoder runs


def encoder_upload(output_dir: str | os.PathLike, repo_id: str, card_config=None) -> tuple[Path, dict]:
    """(encoder folder, extra files) for pushing a run: the card re-rendered for `repo_id` and the run's plots.

    A card hf-encoderize wrote is regenerated in memory (its snippets then load `repo_id`); a hand-written README.md
    is pushed as it is. The local README.md is not modified. `card_config` carries card options (e.g. the results
    folder of an `eval` run elsewhere); its plots are pushed too.
    """
    from dataclasses import replace

    from hf_encoderize.publish import card

    # The run's records and the last `card`'s options, whether OUT or OUT/encoder was named: the same card either way.
    config = card.remembered(replace(card_config or card.CardConfig(str(output_dir)), repo_id=repo_id))
    encoder = encoder_dir(output_dir)
    run_dir = card.run_folder_of(encoder)
    extra: dict[str, Path | bytes] = {}
    if card.is_generated_card(encoder / "README.md"):
        # With the export record, so the Hub's card lists the checked ONNX / GGUF files that this push carries.
        facts = card.gather_facts(config)
        extra["README.md"] = card.render_card(facts, read_export_record(encoder)).encode()
        extra.update(card.pushed_results(facts))  # the summary the scores cite, and .eval_results/
    if encoder != run_dir:
        extra.update({f"plots/{p}": run_dir / p for p in card.plot_files(run_dir)})
    for results in filter(None, (config.results_dir, config.base_results_dir)):
        extra.update({f"plots/eval/{Path(results).name}/{p.name}": p for p in sorted(Path(results).glob("*.png"))})
    return encoder, extra


def push(config: PushConfig, card_config=None) -> list[str]:
    """`hf-encoderize push OUTPUT_DIR REPO_ID`: the encoder folder, its card and the run's plots, in one commit."""
    encoder, extra = encoder_upload(config.output_dir, config.repo_id, card_config)
    return push_folder(encoder, config.repo_id, **config.push_options(), extra_files=extra)


def push_after(output_dir: str | os.PathLike, hub: HubConfig, card_config=None) -> list[str]:
    """`--push-to-hub` of cpt/eval/run: (re)write the local card, then push. Returns the uploaded repo paths."""
    from hf_encoderize.publish.card import CardConfig, is_generated_card, write_card

    card_config = card_config or CardConfig(str(output_dir))
    if is_generated_card(encoder_dir(output_dir) / "README.md"):  # a hand-written card is pushed as it is
        write_card(card_config)
    return push(PushConfig(str(output_dir), hub.push_to_hub, **hub.options().push_options()), card_config)


def eval_push_target(source: str) -> Path:
    """The folder `eval --push-to-hub` pushes: the cpt run folder of an OUT/encoder, else the encoder folder itself.
    A one-line error (before any fine-tuning) when MODEL is not a local encoder."""
    path = Path(source)
    if not (path / "config.json").is_file():
        raise EncoderizeError(f"--push-to-hub needs MODEL to be a local encoder folder (cpt/convert output), "
                              f"not {source!r}")
    encoder = encoder_dir(path)
    return encoder.parent if RunFolder(encoder.parent).run_record.is_file() else encoder


def push_eval(target: Path, results_dir: str, hub: HubConfig) -> list[str]:
    """`eval --push-to-hub`: the card with this evaluation's results, then the push."""
    from hf_encoderize.publish.card import CardConfig

    return push_after(target, hub, CardConfig(str(target), results_dir=results_dir))


# ------------------------------------------------------------------------------------------------ --push-to-hub


def push_run(output_dir: str | os.PathLike, hub: HubConfig) -> list[str]:
    """`--push-to-hub` at the end of cpt/pretrain: card, then push, from the main process only. Returns the uploaded
    repo paths (none when no push was asked or on the other processes)."""
    if not hub.push_to_hub or not is_main_process():
        return []
    files = push_after(output_dir, hub)
    log.info(f"pushed {len(files)} files to {hub.push_to_hub}")
    return files
