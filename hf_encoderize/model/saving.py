"""Save an encoder so that plain transformers and sentence-transformers load it without hf_encoderize.

What goes in the folder:
- `model.safetensors` + `config.json` with `is_causal: false` and the original `model_type`, so
  `AutoModel.from_pretrained(out)` builds the native architecture with bidirectional masks (transformers >= 5.2);
  whenever a plain backend was not verified bidirectional (`plain_attention`: StableLM's sdpa stays causal, GPT-Neo's
  sdpa did not exist before 5.24), config.json also names the backend that was (`attn_implementation`), so neither
  the default load nor a later transformers release picks an unverified one; the release is recorded beside it;
- `modeling_encoderize.py` + `auto_map`, so `AutoModelForMaskedLM.from_pretrained(out, trust_remote_code=True)`,
  `pipeline("fill-mask", ...)` and `AutoModel.from_pretrained(out, trust_remote_code=True)` (the patched backbone)
  work; the file imports only torch and transformers; without `trust_remote_code` the native class loads;
- the tokenizer with its mask and pad tokens, padding on the right (real tokens keep positions 0..n-1);
- sentence-transformers files (modules.json, 1_Pooling/config.json with mean pooling, sentence_bert_config.json,
  config_sentence_transformers.json), so `SentenceTransformer(out)` gives mean-pooled embeddings.

The folder is written under a temporary name next to the target and renamed into place at the end, so a failure
never leaves a half-written encoder, and an existing non-empty folder is only replaced with `overwrite=True` when the
output-folder policy allows it (`common.outputs`: a folder of ours, marked, holding nothing else).
`encoder_dir` finds that folder again, given a run folder (OUT/encoder) or the encoder folder itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from dataclasses import replace
from importlib import resources
from pathlib import Path

import torch

from hf_encoderize.common import outputs
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.files import write_json_atomic
from hf_encoderize.common.locks import held_here
from hf_encoderize.model.head_file import split_head
from hf_encoderize.model.plain_attention import plain_attention, saved_backend

MODELING_FILE = "modeling_encoderize.py"


def check_output_dir(output_dir: str | os.PathLike, overwrite: bool, inputs=()) -> Path:
    """Refuse what the output-folder policy refuses (`common.outputs`): a non-empty folder without `overwrite`, one we
    did not write with it, a file, an input (`inputs`), the working folder, a symlink."""
    return outputs.check_output_dir(output_dir, overwrite=overwrite, inputs=inputs, resumable=False,
                                    flag="output folder")


def encoder_dir(path: str | os.PathLike) -> Path:
    """The saved encoder a folder names: a run folder OUT -> OUT/encoder when it holds one, an encoder folder -> itself.

    Every command that takes "a run folder or an encoder" (card, push, space, push-space) resolves it here, so they
    agree. An encoder folder is one with a config.json (what transformers needs to load it); a run folder without
    encoder/ (a failed or unfinished run) is refused with a one-line error.
    """
    path = Path(path)
    if not path.is_dir():
        raise EncoderizeError(f"{str(path)!r} is not a folder; pass the output folder of cpt/run or an encoder folder")
    for candidate in (path / "encoder", path):
        if (candidate / "config.json").is_file():
            return candidate
    raise EncoderizeError(f"no saved encoder in {str(path)!r} (no config.json there or in encoder/); "
                          "run cpt or convert first")


def _write_json(path: Path, payload: dict) -> None:
    write_json_atomic(path, payload)  # a temporary name renamed into place: never a half-written file


def write_sentence_transformers_files(out: Path, hidden_size: int, max_seq_length: int) -> None:
    """The module layout sentence-transformers reads: Transformer at the root, then mean Pooling."""
    _write_json(
        out / "modules.json",
        [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ],
    )
    # Mean pooling over real tokens: the paper's pooling for SC and IR (section 2, "Fine-tuning protocol").
    _write_json(
        out / "1_Pooling" / "config.json",
        {
            "word_embedding_dimension": hidden_size,
            "pooling_mode_cls_token": False,
            "pooling_mode_mean_tokens": True,
            "pooling_mode_max_tokens": False,
            "pooling_mode_mean_sqrt_len_tokens": False,
            "pooling_mode_weightedmean_tokens": False,
            "pooling_mode_lasttoken": False,
            "include_prompt": True,
        },
    )
    _write_json(out / "sentence_bert_config.json", {"max_seq_length": max_seq_length, "do_lower_case": False})
    _write_json(
        out / "config_sentence_transformers.json",
        {
            "model_type": "SentenceTransformer",
            "prompts": {},
            "default_prompt_name": None,
            "similarity_fn_name": "cosine",
        },
    )


def modeling_source(model_type: str) -> str:
    source = resources.files("hf_encoderize.model.remote_code").joinpath(MODELING_FILE).read_text()
    return source.replace('MODEL_TYPE = "__MODEL_TYPE__"', f"MODEL_TYPE = {model_type!r}")


def save_encoder(
    model, tokenizer, output_dir: str | os.PathLike, *, overwrite: bool = False, metadata=None,
    state_dict: dict | None = None,
) -> Path:
    """Write the encoder to `output_dir` (see module docstring). Returns the folder path.

    `metadata` (an `EncoderFacts`; a dict, such as the `EncoderizeReport`'s, is read into one) is stored under
    `hf_encoderize` in config.json. `state_dict`
    replaces the model's own tensors: the full weights gathered from an FSDP2/ZeRO-3 run, whose model holds shards.
    """
    # A folder inside the live run this process holds (OUT/encoder, OUT/exports/...) is the run's to replace, even one
    # an older version wrote without a marker (a resumed run saves its encoder again).
    out = Path(output_dir) if overwrite and held_here(output_dir) else check_output_dir(output_dir, overwrite)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent))
    tmp.chmod(0o777 & ~_umask())  # mkdtemp makes it 0700; the encoder is an ordinary folder of the user's
    try:
        _write_encoder(model, tokenizer, tmp, metadata or {}, state_dict)
        outputs.write_marker(tmp, "encoder")  # what --overwrite may replace later: this folder and what it holds
        outputs.match_umask(tmp)  # model.safetensors was written 0600 beside 0644 files
        _replace_dir(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def write_encoder_block(folder: str | os.PathLike, facts, *, updates: dict | None = None,
                        remove: tuple[str, ...] = ()) -> None:
    """Write `facts` (an `EncoderFacts`) as the `hf_encoderize` block of a folder another library saved (the
    contrastive stage's sentence-transformers save), with the other config.json `updates` and `remove`d keys: the
    block's second door, through the same typed facts as `save_encoder`'s. Atomic: config.json is written under a
    temporary name and renamed into place, so a crash never leaves a config transformers cannot read."""
    path = Path(folder) / "config.json"
    config = {key: value for key, value in json.loads(path.read_text()).items() if key not in remove}
    _write_json(path, {**config, **(updates or {}), "hf_encoderize": facts.to_dict()})


def _floating_dtype(state_dict: dict | None):
    """The one floating dtype of `state_dict`'s tensors, None when there are none, several, or no state dict."""
    dtypes = {t.dtype for t in (state_dict or {}).values() if torch.is_tensor(t) and t.is_floating_point()}
    return dtypes.pop() if len(dtypes) == 1 else None


@contextlib.contextmanager
def _temporarily(obj, **values):
    """Set attributes for the length of a save and put back what was there (or nothing): saving an encoder never
    changes the live model's config or tokenizer (a CLM phase exporting mid-run must stay causal)."""
    missing = object()
    before = {name: getattr(obj, name, missing) for name in values}
    for name, value in values.items():
        setattr(obj, name, value)
    try:
        yield obj
    finally:
        for name, value in before.items():
            if value is missing:
                delattr(obj, name)
            else:
                setattr(obj, name, value)


def engine_flags(config) -> dict:
    """The config.json fields serving engines read for bidirectional attention, beyond `is_causal` (which transformers,
    vLLM's Qwen2/Qwen3 and TEI's Qwen2 read): `use_bidirectional_attention`, read by TEI's Llama/Mistral/Qwen3/Gemma3
    and vLLM's Gemma 3 (docs/publishing.md has the table, with the files). Left alone where the architecture's own
    transformers config declares the field (Gemma 3): there transformers acts on it (a halved, two-sided sliding
    window), so writing it would change the model that loads."""
    declared = "use_bidirectional_attention" in type(config)().to_dict() if _constructible(config) else True
    return {} if declared else {"use_bidirectional_attention": True}


def _constructible(config) -> bool:
    try:
        type(config)()
    except Exception:  # a config class that needs arguments: leave the field out rather than guess
        return False
    return True


def _write_encoder(model, tokenizer, tmp: Path, metadata, state_dict: dict | None = None) -> None:
    from hf_encoderize.records.encoder_facts import EncoderFacts

    # The one writer of config.json's `hf_encoderize` block: typed, whatever the caller handed over.
    facts = metadata if isinstance(metadata, EncoderFacts) else EncoderFacts.from_dict(metadata)
    config = model.config
    model_type = config.model_type
    from hf_encoderize.model.kinds import ENCODER, classify_config

    native_encoder = classify_config(config) == ENCODER  # BertForMaskedLM & co load with plain AutoModelForMaskedLM
    default_backend, changes = None, {}
    if not native_encoder:
        # Remote code is opt-in for the user: a plain load takes the native class (bidirectional through is_causal);
        # with trust_remote_code=True both classes apply the full patch, which covers the classes plain transformers
        # leaves causal (GPT-Neo's hard-coded causal buffer is rebuilt at every load).
        changes = {"is_causal": False, "use_cache": False, **engine_flags(config),
                   "auto_map": {"AutoModel": f"{MODELING_FILE[:-3]}.EncoderModel",
                                "AutoModelForMaskedLM": f"{MODELING_FILE[:-3]}.EncoderForMaskedLM"}}
        verdicts = plain_attention(model_type)
        default_backend = saved_backend(verdicts)
        # The release the verdicts hold for: the card says "verified with transformers X.Y", and the remote code
        # warns when a later release loads a backend that never ran here.
        facts = replace(facts, plain_attention={**verdicts, "saved_default": default_backend,
                                                "transformers": _transformers_version()})
    changes["hf_encoderize"] = replace(facts, version=_version()).to_dict()
    weights_dtype = _floating_dtype(state_dict)  # before save_pretrained, which may consume the dict
    with _temporarily(config, **changes):
        model.save_pretrained(tmp, state_dict=state_dict)
    if not native_encoder:
        split_head(tmp)  # an untied head in its own file: a plain AutoModel load has no unexpected key to report
    updates = {}
    if default_backend:
        # Some backend stays causal or never ran in plain hands (`roundtrip` explains why): make a plain
        # `AutoModel.from_pretrained(out)` pick the one verified, under this release and later ones.
        # `attn_implementation` in config.json is read by transformers' config constructor; an explicit
        # `attn_implementation=` still wins (the card warns).
        updates["attn_implementation"] = default_backend
    if weights_dtype is not None:
        # save_pretrained writes the live model's dtype (fp32 master weights while training), not that of the
        # weights given: a bf16 export would otherwise load as fp32, at twice the memory.
        updates["dtype"] = str(weights_dtype).removeprefix("torch.")
    if updates:
        payload = json.loads((tmp / "config.json").read_text())
        _write_json(tmp / "config.json", {**payload, **updates})
    with _temporarily(tokenizer, padding_side="right"):  # real tokens keep positions 0..n-1 in plain hands
        tokenizer.save_pretrained(tmp)
    if not native_encoder:
        (tmp / MODELING_FILE).write_text(modeling_source(model_type))
    text_config = config.get_text_config()
    max_len = min(int(getattr(text_config, "max_position_embeddings", 512) or 512), 8192)
    write_sentence_transformers_files(tmp, int(text_config.hidden_size), max_len)


def _replace_dir(tmp: Path, out: Path) -> None:
    if out.exists():
        # Only reached with overwrite=True (or an empty folder): swap, then delete the old copy.
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)


def _transformers_version() -> str:
    import transformers

    return transformers.__version__


def _version() -> str:
    from hf_encoderize.common.version import __version__

    return __version__


def _umask() -> int:
    """The process umask (reading it means setting it, so it is set straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
