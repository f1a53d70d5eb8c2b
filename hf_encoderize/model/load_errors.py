"""One-line explanations for a model that fails to load: each class of failure gets its own message.

Design choices:
- A load that fails on a local folder is explained from the folder itself (`local_folder_problem`): missing or corrupt
  config.json (or one naming no model type transformers knows), missing or corrupt tokenizer files, missing or
  corrupt weights (safetensors or pytorch_model.bin), each named by file, rather than from whatever exception
  transformers happened to raise. A missing path, or a Hub id not in the cache with HF_HUB_OFFLINE set, is "not
  found"; a GGUF file that cannot be read says so. `tests/test_load_errors.py` checks each class through the CLI.
"""

from __future__ import annotations

import json
import os
import pickle
import struct
from pathlib import Path


def _config_validation_error() -> type[Exception]:
    """huggingface_hub's error for a config transformers' validators reject (5 heads for hidden 64): not a
    ValueError, so it needs naming."""
    try:
        from huggingface_hub.errors import StrictDataclassError
    except ImportError:  # an older huggingface_hub: no validators, no such error
        return ValueError
    return StrictDataclassError


# Errors a load can raise for a bad source (safetensors' own error is neither an OSError nor a ValueError; torch.load
# of a garbage pytorch_model.bin raises pickle's UnpicklingError; a config the validators reject raises
# huggingface_hub's StrictDataclassError).
LOAD_ERRORS = (OSError, ValueError, KeyError, RuntimeError, EOFError, TypeError, AttributeError, ImportError,
               pickle.UnpicklingError, _config_validation_error())
_TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer.model", "vocab.json", "vocab.txt", "spiece.model", "tokenizer_config.json",
)
_JSON_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json")


def load_error_message(cfg, err: Exception) -> str:
    """The one-line message for `err`, raised while loading `cfg` (a `loading.LoadConfig`)."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    if isinstance(err, _config_validation_error()) and err.__cause__ is not None:  # the validator's own words
        reason = _first_line(err.__cause__).rstrip(".")
        return f"config.json of {cfg.source!r} is rejected by transformers: {reason}; fix it or pass another model"
    if is_remote_code_refusal(err):
        return remote_code_message(cfg.source)
    if cfg.gguf_file:
        if "gguf" in text.lower() and ("install" in text.lower() or "not available" in text.lower()):
            return "reading GGUF files needs the gguf package: pip install 'hf-encoderize[gguf]'"
        return (
            f"cannot read GGUF file {cfg.gguf_file!r} in {cfg.source!r} (corrupt or unsupported architecture): {text}"
        )
    if not os.path.exists(cfg.source) and ("/" in cfg.source and cfg.source.startswith((".", "/", "~"))):
        return f"model folder {cfg.source!r} not found (the path does not exist); check the path"
    if os.path.isdir(cfg.source):
        return local_folder_problem(Path(cfg.source)) or f"cannot load the local model folder {cfg.source!r}: {text}"
    if isinstance(err, OSError) and _hub_offline() and not _in_hub_cache(cfg):
        return (f"model {cfg.source!r} not found: no local folder of that name, and the Hub id is not in the local "
                "cache while HF_HUB_OFFLINE is set; check the name, or unset HF_HUB_OFFLINE to download it")
    return f"cannot load {cfg.source!r}: not a local model folder or a reachable Hub model id ({text})"


def is_remote_code_refusal(err: BaseException) -> bool:
    """transformers refused to run a model's own code because trust_remote_code was not set."""
    return "contains custom code which must be executed" in str(err)


def remote_code_message(source: str, flag: str | None = "--trust-remote-code") -> str:
    """Ours, not transformers' (which names a keyword argument the CLI user never sees): what the folder ships and
    what to do."""
    names = ""
    config = Path(str(source)) / "config.json"
    if config.is_file():
        try:
            auto_map = json.loads(config.read_bytes()).get("auto_map") or {}
            names = f" ({', '.join(sorted({str(v).split('--')[-1] for v in auto_map.values()}))})" if auto_map else ""
        except (ValueError, AttributeError):
            names = ""
    if flag is None:
        return (f"{str(source)!r} ships its own model code{names}, which this command never runs; pass an encoder "
                "saved by hf-encoderize (convert or cpt)")
    return (f"{str(source)!r} ships its own model code{names}, which runs only with {flag}; pass {flag} if you "
            "trust that code, or use a model transformers supports natively")


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def _in_hub_cache(cfg) -> bool:
    """Whether the Hub cache holds the model's config.json (then a failure is not a missing model)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        return isinstance(try_to_load_from_cache(cfg.source, "config.json", revision=cfg.revision), str)
    except ValueError:  # not a valid repo id (HFValidationError)
        return False


def safetensor_error() -> type[Exception]:
    try:
        from safetensors import SafetensorError
    except ImportError:  # an older safetensors: its errors then surface as OSError/RuntimeError
        return OSError
    return SafetensorError


def local_folder_problem(folder: Path) -> str | None:
    """What is wrong with a local model folder, in one line naming the file, or None when nothing is found.

    Checked in the order transformers reads: config.json, the tokenizer files, then the weights."""
    where = str(folder)
    if not (folder / "config.json").is_file():
        return f"{where!r} has no config.json, so it is not a model folder; pass a folder written by save_pretrained"
    problem = _json_problem(folder / "config.json", must_be_object=True)
    if problem:
        return f"corrupt config.json in {where!r} ({problem}); re-download or re-save the model"
    problem = _model_type_problem(folder / "config.json", where)
    if problem:
        return problem
    for name in _JSON_TOKENIZER_FILES:
        problem = (folder / name).is_file() and _json_problem(folder / name, must_be_object=name != "vocab.json")
        if problem:
            return f"corrupt tokenizer file ({name}: {problem}) in {where!r}; re-download or re-save the tokenizer"
    if not any((folder / name).is_file() for name in _TOKENIZER_FILES):
        return (f"no tokenizer files in {where!r} (tokenizer.json, tokenizer.model or vocab files); save the tokenizer "
                "next to the model (tokenizer.save_pretrained)")
    weights = sorted(folder.glob("*.safetensors")) + sorted(folder.glob("pytorch_model*.bin"))
    if not weights:
        return f"no weights file (model.safetensors or pytorch_model.bin) in {where!r}; re-download or re-save it"
    for path in weights:
        problem = _safetensors_problem(path) if path.suffix == ".safetensors" else _pickle_problem(path)
        if problem:
            return f"corrupt weights (file {path.name}: {problem}) in {where!r}; re-download or re-save the model"
    return None


def _json_problem(path: Path, *, must_be_object: bool) -> str | None:
    try:
        value = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as err:
        return f"not valid JSON: {err}"
    if must_be_object and not isinstance(value, dict):
        return f"holds a JSON {type(value).__name__}, not an object"
    return None


def _model_type_problem(path: Path, where: str) -> str | None:
    """A config.json that is valid JSON but names no architecture transformers knows (remote code aside)."""
    from transformers import CONFIG_MAPPING

    config = json.loads(path.read_bytes())
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        return f"corrupt config.json in {where!r} (no model_type); re-download or re-save the model"
    if model_type not in CONFIG_MAPPING and not config.get("auto_map"):
        import transformers

        return (f"config.json in {where!r} names model_type {model_type!r}, which transformers "
                f"{transformers.__version__} does not know; upgrade transformers (pip install -U transformers)")
    return None


def _pickle_problem(path: Path) -> str | None:
    """`torch.save` writes a zip archive; anything else (a truncated download, an HTML error page) is not one."""
    import zipfile

    if not zipfile.is_zipfile(path):
        return "not a PyTorch checkpoint archive (truncated or not a torch.save file)"
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError) as err:
        return f"unreadable archive ({err})"
    return f"damaged member {bad!r}" if bad else None


def _safetensors_problem(path: Path) -> str | None:
    """A safetensors file is an 8-byte header length, a JSON header, then the tensors; a truncated download leaves a
    file shorter than the header says (which loads lazily and would fail only later, or not at all on some tensors)."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return "shorter than a safetensors header"
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            return "header larger than the file (truncated or not a safetensors file)"
        try:
            header = json.loads(handle.read(length))
            end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
        except (ValueError, UnicodeDecodeError, KeyError, TypeError, IndexError, AttributeError):
            return "unreadable header (not a safetensors file)"
    if 8 + length + end > size:
        return f"truncated: {size} bytes, the header describes {8 + length + end}"
    return None
