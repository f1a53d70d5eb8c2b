"""LoRA / QLoRA for continued pretraining, through peft.

Design choices:
- LoRA adapters go on every linear layer by default (`all-linear`), the usual choice for continued pretraining.
- The mask token's embedding row must still learn (it may be a brand-new row): peft's `trainable_token_indices`
  trains exactly that row without unfreezing the whole embedding matrix.
- On save the adapters are merged, so the saved encoder is a plain model; `save_adapter` also keeps the adapter.
- QLoRA (`load_in_4bit`) needs bitsandbytes and a GPU; it is refused in one line otherwise. Its adapters are not
  merged into the NF4 weights (that re-quantises with loss and saves a 4-bit checkpoint that needs bitsandbytes and a
  GPU to load): `merge_full_precision` reloads the base unquantised, in bf16 on CPU, and merges the saved adapter there.
- Gradient checkpointing is on only when the run asks for it (`apply_lora(..., gradient_checkpointing=True)`), and
  then non-reentrant. peft's `prepare_model_for_kbit_training` would otherwise turn on the reentrant kind behind the
  run record's back.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import HARMLESS, identity
from hf_encoderize.common.validation import check_number
from hf_encoderize.model.loading import LoadConfig


@dataclass
class AdapterConfig:
    """Parameter-efficient training options (off by default: full fine-tuning)."""

    _: KW_ONLY
    lora_r: int = 0
    """LoRA rank; 0 trains all weights."""
    lora_alpha: int = 16
    """LoRA scaling numerator (scale = alpha / r)."""
    lora_targets: str = "all-linear"
    """Comma-separated module names to adapt (e.g. q_proj,v_proj: attention only; q_proj,k_proj,v_proj,o_proj,
    gate_proj,up_proj,down_proj: a Llama block's attention and MLP; any module name the model has), or all-linear
    (every linear layer but the head)."""
    load_in_4bit: bool = False
    """QLoRA: load the base weights in 4-bit NF4 (bitsandbytes, GPU only). Needs --lora-r."""
    save_adapter: bool = field(default=False, metadata=identity(HARMLESS))
    """Also save the unmerged adapter next to the merged encoder."""

    def __post_init__(self):
        check_number("--lora-r", self.lora_r, minimum=0, integer=True)  # 0: off
        check_number("--lora-alpha", self.lora_alpha, above=0, integer=True)
        if self.load_in_4bit and not int(self.lora_r):
            raise EncoderizeError("--load-in-4bit trains adapters only: also pass --lora-r (e.g. 16)")


def check_qlora_available() -> None:
    if importlib.util.find_spec("bitsandbytes") is None:
        raise EncoderizeError("--load-in-4bit needs bitsandbytes: pip install 'hf-encoderize[qlora]'")
    if not torch.cuda.is_available():
        raise EncoderizeError("--load-in-4bit needs a CUDA or ROCm GPU; drop it to train on CPU")


def quantization_config():
    """NF4 4-bit weights with bf16 compute, the QLoRA recipe."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch.bfloat16)


def apply_lora(model, cfg: AdapterConfig, mask_token_id: int, *, gradient_checkpointing: bool = False):
    """Wrap `model` with LoRA adapters in place; returns the `PeftModel` (whose base model trains through adapters).

    `gradient_checkpointing=True` turns on non-reentrant activation checkpointing; `False` leaves the model as it is
    (for 4-bit too: the kbit preparation no longer turns it on), so the run record says what ran.
    """
    from peft import LoraConfig, get_peft_model, prepare_model_for_kbit_training

    if cfg.load_in_4bit:
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    if gradient_checkpointing:
        enable_checkpointing(model)
    targets = target_modules(cfg)
    if targets != "all-linear":
        _check_targets(model, targets)
    config = LoraConfig(r=int(cfg.lora_r), lora_alpha=int(cfg.lora_alpha), target_modules=targets, lora_dropout=0.0,
                        trainable_token_indices=[int(mask_token_id)])
    return get_peft_model(model, config)


def target_modules(cfg: AdapterConfig) -> str | list[str]:
    """`--lora-targets` as peft takes it: "all-linear" or the list of module names."""
    return cfg.lora_targets if cfg.lora_targets == "all-linear" else [t.strip() for t in cfg.lora_targets.split(",")]


def check_targets(model, cfg: AdapterConfig) -> None:
    """Refuse `--lora-targets` naming a module `model` does not have, in one line (nothing to check for all-linear)."""
    targets = target_modules(cfg)
    if cfg.lora_r and targets != "all-linear":
        _check_targets(model, targets)


def check_targets_before_load(folder: str | Path, cfg: AdapterConfig) -> None:
    """`check_targets` on the model's skeleton, built from `folder`'s config on the meta device (no weights read, no
    memory), so a typo is refused before the load. A config that does not build that way is checked once loaded."""
    if not cfg.lora_r or target_modules(cfg) == "all-linear":
        return
    from transformers import AutoConfig, AutoModel

    try:
        with torch.device("meta"):
            skeleton = AutoModel.from_config(AutoConfig.from_pretrained(str(folder)))
    except Exception:  # remote code, an unknown architecture: the loaded model is checked instead
        return
    check_targets(skeleton, cfg)


def _check_targets(model, targets: list[str]) -> None:
    """peft adapts every module whose name ends in a target and passes over a target that matches none, so a typo
    would train fewer adapters than asked, without a word."""
    names = {name.rsplit(".", 1)[-1] for name, _ in model.named_modules() if name}
    missing = [t for t in targets if t not in names]
    if missing:
        linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                         if isinstance(module, torch.nn.Linear)})
        raise EncoderizeError(f"--lora-targets: this model has no module named {', '.join(map(repr, missing))}; its "
                              f"linear layers are {', '.join(linear)} (or pass all-linear)")


def enable_checkpointing(model) -> None:
    """Non-reentrant activation checkpointing: the reentrant kind drops gradients when the inputs of a checkpointed
    block do not require grad, which is the rule with frozen embeddings."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # the newer name; `gradient_checkpointing_*` is deprecated
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def merged_model(peft_model):
    """The base model with adapters folded into its weights (a normal transformers model again)."""
    return peft_model.merge_and_unload()


def merge_full_precision(adapter_dir: str | Path, load: LoadConfig, dtype: torch.dtype = torch.bfloat16):
    """Merge a saved adapter into the base model reloaded without quantisation, in `dtype` on CPU.

    The base is loaded and encoderized as cpt did (same loader, same added mask/pad rows), then the adapter (LoRA
    weights and the trained mask-token row, plus the whole embedding matrices when peft saved them because they grew)
    is loaded and merged. Returns `(model, tokenizer)`: a plain transformers model, no peft or bitsandbytes inside.
    """
    from peft import PeftModel

    from hf_encoderize.model.bidirectional import encoderize
    from hf_encoderize.model.loading import is_native_encoder, load_decoder, load_encoder

    load = dataclasses.replace(load, dtype=str(dtype).removeprefix("torch."))
    if is_native_encoder(load):
        base, tokenizer = load_encoder(load, model_kwargs={"device_map": "cpu"})
    else:
        base, tokenizer = load_decoder(load, model_kwargs={"device_map": "cpu"})
        encoderize(base, tokenizer)
    model = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    return model.eval(), tokenizer
