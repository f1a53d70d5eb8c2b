"""The encoder as a sentence-transformers model: loaded in fp32 master weights with training dropout, its pooling,
LoRA adapters when asked, the prompts it is trained and saved with, and the adapters merged back at the end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import is_main_process
from hf_encoderize.model.load_errors import is_remote_code_refusal, remote_code_message
from hf_encoderize.model.positions import check_positions, position_limit
from hf_encoderize.recipes.contrastive.config import POOLINGS, ContrastiveConfig
from hf_encoderize.training.lora import AdapterConfig, check_targets, target_modules

_DROPOUT_FIELDS = ("attention_dropout", "hidden_dropout", "hidden_dropout_prob", "attention_probs_dropout_prob",
                   "resid_pdrop", "attn_pdrop", "embd_pdrop", "dropout")

def dropout_kwargs(folder: Path, value: float) -> dict:
    """The dropout fields this architecture's config has, set to `value` (SimCSE needs dropout in training)."""
    config = json.loads((folder / "config.json").read_text())
    return {name: value for name in _DROPOUT_FIELDS if isinstance(config.get(name), (int, float))
            and not isinstance(config.get(name), bool)}

# The lowest peft `--lora-r` runs on: pyproject's floor. transformers 5.24's PEFT integration asks for 0.22, which is
# not released (0.21.2 is PyPI's newest); every integration call this path makes (add_adapter, the adapter state dict
# at each save, load_adapter at --resume) runs on 0.21 in tests/test_contrastive_training.py, in the floor CI too.
PEFT_FLOOR = "0.21.0"


def check_peft_integration() -> None:
    """Let `--lora-r` run on a peft from PEFT_FLOOR on, or refuse it in one line before any work. transformers'
    PEFT integration (which sentence-transformers' `add_adapter`, checkpoint saving and resuming go through) checks
    its own minimum at every call; when that minimum is above the installed peft and the installed one is at least
    our floor, the minimum is lowered to the installed release for this process: a gate, not a missing feature."""
    from importlib.metadata import version

    from packaging.version import Version
    from transformers.integrations import peft as integration

    installed, wanted = version("peft"), getattr(integration, "MIN_PEFT_VERSION", None)
    if Version(installed) < Version(PEFT_FLOOR):
        raise EncoderizeError(f"contrastive --lora-r needs peft >= {PEFT_FLOOR} (installed: {installed}); "
                              f"pip install 'peft>={PEFT_FLOOR}', or drop --lora-r (a full fine-tune)")
    if wanted and Version(installed) < Version(wanted):
        integration.MIN_PEFT_VERSION = installed  # read at call time by every integration method


DEFAULT_MAX_SEQ_LENGTH = 128

def _check_positions(source: Path, max_seq_length: int | None) -> int:
    """The tokens per text: the one asked for, or the default capped at the model's positions. Longer inputs than
    the model has positions for fail deep in the forward pass (an index error), so an explicit value above them is
    refused before the load, from the folder's config."""
    try:
        positions = position_limit(json.loads((Path(source) / "config.json").read_text()))
    except (OSError, ValueError, AttributeError):
        positions = None  # no readable config here: the load below reports the folder
    if max_seq_length is None:
        return min(DEFAULT_MAX_SEQ_LENGTH, positions) if positions is not None else DEFAULT_MAX_SEQ_LENGTH
    check_positions(max_seq_length, positions)
    return max_seq_length

def build_model(source: Path, config: ContrastiveConfig, dropout: dict, adapter: AdapterConfig):
    """The encoder as a sentence-transformers model with the chosen pooling, LoRA adapters added when asked."""
    from peft import LoraConfig
    from sentence_transformers import SentenceTransformer, models
    from transformers import set_seed

    max_seq_length = _check_positions(source, config.max_seq_length)
    master = None if adapter.lora_r else {"dtype": torch.float32}  # full fine-tune: fp32 master weights
    try:
        model = SentenceTransformer(str(source), device=None, config_kwargs=dropout or None, model_kwargs=master)
    except Exception as err:
        if is_remote_code_refusal(err):
            raise EncoderizeError(remote_code_message(str(source), flag=None)) from None
        raise EncoderizeError(f"cannot load {str(source)!r} as an encoder: {type(err).__name__}: "
                              f"{' '.join(str(err).split())[:200]}") from None
    model.max_seq_length = max_seq_length
    dim = model.get_embedding_dimension()
    pooling = models.Pooling(dim, pooling_mode=POOLINGS[config.pooling], include_prompt=not config.lead_token)
    model = SentenceTransformer(modules=[model[0], pooling], device=str(model.device))
    if adapter.lora_r:  # sentence-transformers' own PEFT integration: its checkpoints save and resume the adapters
        check_targets(model[0].auto_model, adapter)  # peft would pass over a target that matches nothing
        set_seed(config.seed)  # LoRA's A matrices start random; the Trainer seeds only later, in its __init__
        model.add_adapter(LoraConfig(r=int(adapter.lora_r), lora_alpha=int(adapter.lora_alpha),
                                     target_modules=target_modules(adapter), lora_dropout=0.0,
                                     task_type="FEATURE_EXTRACTION"))
    return model

def saved_prompts(config: ContrastiveConfig, tokenizer) -> dict[str, str]:
    """The sentence-transformers prompts the model is trained and saved with: "query", "document" and, with a lead
    token, "text" (the lead token alone, the default prompt)."""
    lead = _lead(config, tokenizer)
    prompts = {"query": lead + config.query_prefix, "document": lead + config.document_prefix, "text": lead}
    return {name: prompt for name, prompt in prompts.items() if prompt}

def _lead(config: ContrastiveConfig, tokenizer) -> str:
    return 2 * (tokenizer.eos_token or "") if config.lead_token else ""

def source_dtype(source: Path) -> torch.dtype | None:
    """The floating dtype the encoder at `source` is saved in (config.json's `dtype`, or `torch_dtype` before
    transformers 5), None when it does not say."""
    config = json.loads((source / "config.json").read_text())
    name = config.get("dtype") or config.get("torch_dtype")
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    return dtype if isinstance(dtype, torch.dtype) and dtype.is_floating_point else None

def warn_without_dropout(model, config) -> None:
    """One warning line when SimCSE trains with no dropout anywhere: its two views of each text are then identical."""
    import torch

    if config.method != "simcse" or not is_main_process():
        return
    transformer = model[0].auto_model
    settings = transformer.config.to_dict()
    dropped = [name for name, value in settings.items() if ("dropout" in name or "pdrop" in name) and
               "classifier" not in name and isinstance(value, (int, float)) and value > 0]
    if dropped or any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in transformer.modules()):
        return
    advice = ("pass --dropout 0.1 or more (LLM2Vec uses 0.3)" if config.dropout == 0 else
        "this model's config has no dropout setting that --dropout turns on; train --method supervised on pairs")
    print(f"warning: simcse trains with no dropout, so the two views of each text are identical and only the other "
          f"texts of the batch teach the model; {advice}", file=sys.stderr, flush=True)

def merge_adapters(model, source: Path, adapter_dir: Path) -> None:
    """Fold the trained LoRA adapters into the weights: the adapter is saved, then applied to a fresh copy of the
    source encoder and merged (peft's `merge_and_unload`), so the result is a plain model, as cpt's LoRA is."""
    from peft import PeftModel
    from transformers import AutoModel

    transformer = model[0]
    transformer.auto_model.save_pretrained(str(adapter_dir))  # the adapter only (transformers' PEFT integration)
    fresh = AutoModel.from_pretrained(str(source), dtype=transformer.auto_model.dtype)
    merged = PeftModel.from_pretrained(fresh, str(adapter_dir)).merge_and_unload()
    if isinstance(getattr(type(transformer), "auto_model", None), property):
        transformer.model = merged  # sentence-transformers >= 6: `auto_model` is a read-only alias of `model`
    else:
        transformer.auto_model = merged
