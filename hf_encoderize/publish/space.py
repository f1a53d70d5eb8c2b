"""`hf-encoderize space OUTPUT_DIR` and `hf-encoderize push-space OUTPUT_DIR SPACE_ID`: the Gradio demo of an encoder.

Design choices:
- The app is `space/app.py` (top of the repository, the UI), `space_models.py` (settings, the trust check, model
  loading) and the gradio-free `space_compute.py`, shipped in the
  wheel (`publish.shipped`) and uploaded together: on the Hub it runs without hf_encoderize (its requirements are
  torch, transformers and sentence-transformers; gradio comes from the Space's `sdk_version`).
  `space` imports that very file, so what runs on a laptop is what `push-space` uploads.
- OUTPUT_DIR is a `cpt` run folder (OUT, holding encoder/ and run_record.json) or an encoder folder itself, resolved
  by `saving.encoder_dir` as `card` and `push` resolve it (`mlm_encoder`).
- Two models when the run has an embedding model: OUT/contrastive (written by `contrastive` or `run --contrastive`)
  makes the embeddings of Similarity, Semantic search and Compare, and the MLM encoder keeps Fill-mask (the
  contrastive folder has no MLM head). `--embedding-model encoder` opts out; `--embedding-model FOLDER` names another
  sentence-transformers folder. A contrastive folder passed as OUTPUT_DIR leads back to the encoder it was trained
  from (its contrastive_run.json, else encoder/ beside it), so `space OUT/contrastive` shows the same as `space OUT`.
- The base decoder for the Compare tab comes from the flags, else run_record.json, else the encoder's config.json
  metadata (the app reads that last one itself, so a Space that only knows a Hub id still finds its base).
- push-space uploads a staged copy: app.py, requirements.txt pinned to the versions installed here, README.md with the
  Space YAML header (both sized to the models by `publish.space_card`: hardware, preloads, the torch wheel), and
  space_config.json naming the encoder: a Hub model id, or (without one) the encoder folder uploaded into the Space
  next to the app as encoder/. The embedding model goes the same way, as a second entry: `--embedding-model-id` (a Hub
  repo pushed on its own), else the contrastive folder uploaded as contrastive/. One Space repo and one commit; the
  app on the Hub reads both names from space_config.json. app.py goes as is, so the Space carries its
  TRUSTED_MODELING_SHA256 and runs an encoder's modeling_encoderize.py only when it is the file this version writes
  (the embedding model never runs remote code).
- `--trust-remote-code` (`SpaceConfig.trust_remote_code`) reaches the app as `Settings.trust_remote_code`, the same
  switch a Space gets from ENCODER_TRUST_REMOTE_CODE=1.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.run_folder import CONTRASTIVE_RECORD, RunFolder
from hf_encoderize.common.validation import check_number
from hf_encoderize.model.saving import encoder_dir
from hf_encoderize.publish.hub import PushOptions
from hf_encoderize.publish.space_card import (
    SPACE_DIR,
    pinned_requirements,
    preload_entries,
    space_readme,
    suggest_hardware,
    weight_bytes,
)
from hf_encoderize.records.contrastive_record import ContrastiveRecord
from hf_encoderize.records.encoder_facts import EncoderFacts
from hf_encoderize.records.run_record import RunRecord

APP_MODULE = "hf_encoderize_space_app"
INSTALL_HINT = "pip install 'hf-encoderize[space]'"


@dataclass
class SpaceConfig:
    """Which encoder the local demo shows and where it listens."""

    output_dir: str
    """A `cpt`/`run` folder (holding encoder/, maybe contrastive/), an encoder folder written by `convert`, or a
    `contrastive` output folder."""
    _: KW_ONLY
    embedding_model: str = "auto"
    """Which model makes the embeddings of Similarity, Semantic search and Compare: auto (the run's contrastive/
    embedding model when it has one, else the encoder), encoder (the MLM encoder: opt out), or a sentence-transformers
    folder's path (e.g. runs/X/contrastive). Fill-mask always uses the MLM encoder."""
    base_model: str | None = None
    """Base decoder for the Compare tab (Hub id, folder or .gguf file); default: the one recorded with the encoder."""
    host: str = "127.0.0.1"
    """Address to listen on; the default keeps the demo on this machine (0.0.0.0 shares it on your network)."""
    port: int = 7860
    """TCP port to listen on; 0 picks a free one."""
    trust_remote_code: bool = False
    """Let Fill-mask run the encoder's modeling_encoderize.py even when it is not byte for byte the file this
    hf-encoderize writes (an edited or downloaded encoder); without it such a file never runs and the tab says why."""
    share: bool = False
    """Also serve the demo at a temporary public https://*.gradio.live link (through Gradio's share servers; anyone
    with the link can use it while this runs). Needed where this machine's localhost cannot be reached (Colab, some
    containers and proxies)."""

    def __post_init__(self):
        check_number("--port", self.port, minimum=0, maximum=65535, integer=True)  # 0: any free port


def is_contrastive(folder: Path) -> bool:
    """A `contrastive` stage's output: its config.json records the stage under `hf_encoderize.contrastive`."""
    return EncoderFacts.of(folder).contrastive is not None


def mlm_encoder(output_dir: str | os.PathLike) -> Path:
    """The encoder Fill-mask uses: `saving.encoder_dir`, except that a contrastive folder (no MLM head) leads back to
    the encoder it was trained from: contrastive_run.json's source, else the run's encoder/ beside it, else itself."""
    folder = encoder_dir(output_dir)
    if not is_contrastive(folder):
        return folder
    record = ContrastiveRecord.from_json(folder / CONTRASTIVE_RECORD)
    source = record.source if record else None
    for candidate in (Path(source) if source else None, RunFolder(folder.parent).encoder):
        if candidate and (candidate / "config.json").is_file() and not is_contrastive(candidate):
            return candidate
    return folder  # the MLM encoder is gone: Fill-mask says this model has no MLM head


def embedding_dir(output_dir: str | os.PathLike, choice: str = "auto") -> Path | None:
    """The sentence-transformers folder of the embedding tabs, or None when the MLM encoder makes the embeddings.

    `choice` is `auto` (OUTPUT_DIR itself when it is a contrastive folder, else OUT/contrastive when the run holds one),
    `encoder` (the opt-out: None) or a folder. OUT/encoder given as OUTPUT_DIR is the encoder alone, as it says.
    """
    if choice == "encoder":
        return None
    if choice != "auto":
        if not (Path(choice) / "config.json").is_file():
            raise EncoderizeError(f"--embedding-model {choice!r} is not a model folder (no config.json there); pass "
                                  "auto, encoder or the folder of a sentence-transformers model")
        return Path(choice)
    given = encoder_dir(output_dir)
    if is_contrastive(given):
        return given
    run_model = RunFolder(output_dir).contrastive
    return run_model if given != Path(output_dir) and (run_model / "config.json").is_file() else None


def recorded_base(output_dir: str | os.PathLike, encoder: Path) -> EncoderFacts:
    """The base decoder the encoder came from (`base_model`, `gguf_file`, `revision`): run_record.json of a `cpt`
    run, else config.json's metadata."""
    for folder in (RunFolder(output_dir), RunFolder(encoder.parent)):
        record = RunRecord.from_json(folder.run_record)
        if record is not None and record.base_model:
            return EncoderFacts(base_model=record.base_model, gguf_file=record.gguf_file, revision=record.revision)
    return EncoderFacts.of(encoder)


def app_settings(cfg: SpaceConfig):
    """The app's `Settings` for this run: the MLM encoder (Fill-mask), the embedding model of the embedding tabs (the
    run's contrastive/ unless `embedding_model` says otherwise) and the base decoder (flags, else the run's records)."""
    app = load_app()
    encoder = mlm_encoder(cfg.output_dir)
    embedding = embedding_dir(cfg.output_dir, cfg.embedding_model)
    base = EncoderFacts(base_model=cfg.base_model)
    if cfg.base_model and cfg.base_model.endswith(".gguf") and Path(cfg.base_model).is_file():
        path = Path(cfg.base_model).resolve()  # transformers wants the folder plus the file name
        base = EncoderFacts(base_model=str(path.parent), gguf_file=path.name)
    elif not cfg.base_model:
        base = recorded_base(cfg.output_dir, encoder)
    return app.Settings(encoder=str(encoder), embedding_model=str(embedding) if embedding else None,
                        base_model=base.base_model, base_gguf_file=base.gguf_file,
                        base_revision=base.revision, trust_remote_code=cfg.trust_remote_code)


def load_app():
    """Import `space/app.py` (needs gradio: the `space` extra) as a module, once."""
    if APP_MODULE in sys.modules:
        return sys.modules[APP_MODULE]
    if importlib.util.find_spec("gradio") is None:
        raise EncoderizeError(f"the Space needs gradio; install it with {INSTALL_HINT}")
    if not (SPACE_DIR / "app.py").is_file():
        raise EncoderizeError(f"the Space app is not at {SPACE_DIR / 'app.py'}; reinstall hf-encoderize "
                              "(pip install --force-reinstall hf-encoderize), whose package data ships it")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # no telemetry calls from a local demo
    spec = importlib.util.spec_from_file_location(APP_MODULE, SPACE_DIR / "app.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[APP_MODULE] = module  # dataclasses look their module up while the file executes
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[APP_MODULE]
        raise
    return module


def launch_space(cfg: SpaceConfig, *, block: bool = True):
    """Serve the demo for `cfg.output_dir` on `cfg.host:cfg.port` (and a public link with `cfg.share`). Returns
    `(demo, url)`, the local URL; `demo.share_url` is the public one; `demo.close()` stops it.

    With `block=True` (the CLI) this prints where the demo is and returns only when the server stops (Ctrl+C).
    Gradio's own start-up lines stay quiet: they tell a CLI user to "set `share=True` in `launch()`", which is
    `--share` here.
    """
    settings = app_settings(cfg)
    app = load_app()
    demo = app.build_demo(settings)
    try:
        _, url, share_url = demo.launch(server_name=cfg.host, server_port=int(cfg.port) or _free_port(cfg.host),
                                        prevent_thread_lock=True, theme=app.theme(), css=app.APP_CSS,
                                        ssr_mode=False, quiet=True, show_error=True, share=cfg.share)
    except OSError as err:
        raise EncoderizeError(f"cannot listen on {cfg.host}:{cfg.port} ({err}); pick another --port") from None
    except ValueError as err:  # Gradio: "When localhost is not accessible, a shareable link must be created"
        if "share=True" not in str(err):
            raise
        demo.close()  # the server had started before Gradio found its page unreachable
        raise EncoderizeError(f"this machine's {cfg.host}:{cfg.port} cannot be reached from here (a notebook host "
                              "or a proxy); pass --share for a public gradio.live link") from None
    if block:
        print(serving_lines(url, share_url, cfg.share), flush=True)
        demo.block_thread()
    return demo, url


def serving_lines(url: str, share_url: str | None, share: bool) -> str:
    """Where the demo answers, as the CLI prints it: the local URL, then the public link or how to get one."""
    lines = [f"Serving the encoder demo at {url} (Ctrl+C stops it)"]
    if share_url:
        lines.append(f"Public link (temporary, anyone with it can use the demo): {share_url}")
    elif share:
        lines.append("Could not create the public link (Gradio's share servers were not reached); serving locally.")
    else:
        lines.append("Add --share for a temporary public gradio.live link.")
    return "\n".join(lines)


def _free_port(host: str) -> int:
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


# ------------------------------------------------------------------------------------------------ push-space


@dataclass
class PushSpaceConfig(PushOptions):
    """Which encoder the Space shows and which Space repo gets the app (the push options come from `PushOptions`)."""

    REPO_ID_FIELDS = ("space_id", "model_id", "embedding_model_id")

    output_dir: str
    """A `cpt`/`run` folder (holding encoder/, maybe contrastive/), an encoder folder written by `convert`, or a
    `contrastive` output folder."""
    space_id: str
    """Space repo id, `user/name` or `org/name` (created with the gradio SDK if missing)."""
    _: KW_ONLY
    model_id: str | None = None
    """Hub model repo the Space loads (push it first with `hf-encoderize push`); default: upload the encoder folder
    into the Space next to the app."""
    embedding_model: str = "auto"
    """Which model makes the Space's embeddings: auto (the run's contrastive/ embedding model when it has one, else
    the encoder), encoder (opt out), or a sentence-transformers folder's path (e.g. runs/X/contrastive). It is
    uploaded into the Space as contrastive/ unless `embedding_model_id` names its Hub repo; Fill-mask always uses the
    encoder."""
    embedding_model_id: str | None = None
    """Hub model repo of the embedding model (push it first: `hf-encoderize push OUT/contrastive REPO`); the Space
    loads it from there instead of a copy in the Space."""
    base_model: str | None = None
    """Hub id of the base decoder for the Compare tab; default: the recorded base when it is a Hub id (a path on this
    machine cannot be reached from a Space)."""

    def __post_init__(self):
        super().__post_init__()  # the repo ids and the push target
        if self.embedding_model_id and self.embedding_model == "encoder":
            raise EncoderizeError("--embedding-model encoder opts out of an embedding model; drop --embedding-model-id")


def push_space(cfg: PushSpaceConfig) -> list[str]:
    """`hf-encoderize push-space OUTPUT_DIR SPACE_ID`: app, pinned requirements, README and where the models are.

    space_config.json names the encoder (`--model-id`, else the folder bundled as encoder/) and, when the run has an
    embedding model, that too (`--embedding-model-id`, else the folder bundled as contrastive/): both in one commit.
    """
    from hf_encoderize.publish.hub import push_folder
    from hf_encoderize.publish.upload_set import upload_set

    encoder = mlm_encoder(cfg.output_dir)
    embedding = None if cfg.embedding_model_id else embedding_dir(cfg.output_dir, cfg.embedding_model)
    base = _space_base(cfg, encoder)
    config = {"encoder": cfg.model_id or "encoder", **base}
    if cfg.embedding_model_id or embedding:
        config["embedding_model"] = cfg.embedding_model_id or "contrastive"
    hardware = suggest_hardware(space_weight_bytes(cfg, encoder, base))
    readme = space_readme(title=f"{(cfg.model_id or cfg.space_id).split('/')[-1]} demo", hardware=hardware,
                          models=[name for name in (cfg.model_id, cfg.embedding_model_id, base.get("base_model"))
                                  if name],
                          preload=preload_entries([cfg.model_id, cfg.embedding_model_id], base))
    extra: dict[str, Path | bytes] = {
        "README.md": readme.encode(),
        "requirements.txt": pinned_requirements(hardware, gguf=bool(base.get("base_gguf_file"))).encode(),
        "space_config.json": (json.dumps(config, indent=2) + "\n").encode(),
    }
    if cfg.model_id is None:  # bundle the encoder (minus any training state) inside the Space repo
        extra.update({f"encoder/{name}": path for name, path in upload_set(encoder).items()})
    if embedding is not None:  # the embedding model, bundled the same way
        extra.update({f"contrastive/{name}": path for name, path in upload_set(embedding).items()})
    options = {**cfg.push_options(), "commit_message": cfg.commit_message or "Upload Space with hf-encoderize"}
    return push_folder(SPACE_DIR, cfg.space_id, repo_type="space", space_sdk="gradio", **options, extra_files=extra)


def space_weight_bytes(cfg: PushSpaceConfig, encoder: Path, base: dict) -> int:
    """The weights the pushed Space may hold at once: the encoder (Fill-mask), the embedding model and the base
    decoder (Compare). An embedding model without a local copy (a Hub one, or the encoder itself, loaded a second time
    by sentence-transformers) and the base decoder count as large as the encoder: the Hub cannot be asked from here."""
    size = weight_bytes(encoder)
    try:
        local = embedding_dir(cfg.output_dir, cfg.embedding_model)
    except EncoderizeError:  # --embedding-model-id names the model; a stale --embedding-model folder is not needed
        local = None
    embedding = weight_bytes(local) or size
    return size + embedding + (size if base.get("base_model") else 0)


def _space_base(cfg: PushSpaceConfig, encoder: Path) -> dict:
    """The base decoder as the Space will load it: only a Hub id works there."""
    from hf_encoderize.publish.hub import check_repo_id

    if cfg.base_model:
        check_repo_id(cfg.base_model)
        return {"base_model": cfg.base_model}
    recorded = recorded_base(cfg.output_dir, encoder)
    name = recorded.base_model
    if not name or Path(name).exists() or name.count("/") != 1:
        return {}  # a local path (or nothing): the Space's Compare tab says no base is available
    return {"base_model": name, "base_gguf_file": recorded.gguf_file, "base_revision": recorded.revision}
