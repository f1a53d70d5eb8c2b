"""The model under evaluation: loaded once, reset to its pretrained weights before every fine-tuning run.

Design choices:
- Three kinds of model, one interface (`Backbone.model(input_ids, attention_mask).last_hidden_state`):
  a native encoder (BERT, ModernBERT, MiniLM) through `AutoModel`; a decoder, loaded with `loading.load_decoder` (Hub
  id, folder, GGUF) and made bidirectional with `bidirectional.encoderize` (a folder from `cpt`/`convert` already has
  `is_causal: false`; the patch is then a no-op that also covers flash attention); or a decoder kept causal
  (`causal=True`), an ablation outside the paper's protocol: section 2 fine-tunes every model, CLM-pretrained ones
  included, with bidirectional attention, so the paper's CLM results are the bidirectional default here. Only the
  backbone (`LlamaModel` inside `LlamaForCausalLM`) is kept.
- The pretrained weights are loaded from disk once. A CPU copy of the state dict restores them before each run
  (`Backbone.fresh()`), so a 30-run grid reads the checkpoint once.
- Weights are kept in float32 (`dtype="auto"` means float32 here) and the forward pass runs under bf16 autocast on a
  GPU: mixed-precision fine-tuning. `--attn-implementation auto` picks flash attention on a GPU that has flash-attn,
  else sdpa (eager for a class without it); never flex, which would compile for every padded batch width.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.model.loading import LoadConfig


@dataclass
class Backbone:
    """A loaded model, its tokenizer and a CPU copy of its pretrained weights."""

    model: torch.nn.Module
    tokenizer: object
    mode: str
    """`bidirectional` or `causal`."""
    device: torch.device
    initial_state: dict

    @property
    def hidden_size(self) -> int:
        return int(self.model.config.get_text_config().hidden_size)

    @property
    def max_positions(self) -> int:
        config = self.model.config.get_text_config()
        limit = getattr(config, "max_position_embeddings", None) or 512
        # BERT-likes count two special positions they never use for text (RoBERTa's padding offset).
        return int(limit) - (2 if config.model_type in ("roberta", "xlm-roberta", "camembert") else 0)

    def fresh(self) -> torch.nn.Module:
        """The model with its pretrained weights restored (no disk read), in train mode."""
        self.model.load_state_dict(self.initial_state)
        self.model.requires_grad_(True)
        return self.model.train()

    def autocast(self):
        """bf16 autocast on GPU (fp32 master weights); nothing on CPU."""
        if self.device.type == "cuda":
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()


def pick_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise EncoderizeError(f"--device {name} needs a CUDA or ROCm GPU; use --device cpu")
    if name.startswith("cuda:") and int(name.split(":")[1]) >= torch.cuda.device_count():
        raise EncoderizeError(f"--device {name}: this machine has {torch.cuda.device_count()} GPU(s), numbered from "
                              "0; pass one of them, or --device cuda")
    return torch.device(name)


def model_name(load: LoadConfig, causal: bool) -> str:
    """Short name used as the results folder: the folder or repo name (`runs/x/encoder` gives `x`)."""
    if load.gguf_file:
        name = Path(load.gguf_file).stem
    else:
        path = Path(load.source.rstrip("/"))
        name = path.parent.name if path.name == "encoder" and path.parent.name else path.name
    return f"{name}-causal" if causal else name


def load_backbone(load: LoadConfig, *, causal: bool = False, device: str = "auto") -> Backbone:
    """Load `load.source` for fine-tuning (see module docstring). Raises `EncoderizeError` if it cannot be loaded."""
    from hf_encoderize.model.loading import is_native_encoder

    target = pick_device(device)
    if load.dtype == "auto":
        load = LoadConfig(load.source, revision=load.revision, gguf_file=load.gguf_file,
                          attn_implementation=load.attn_implementation, dtype="float32",
                          trust_remote_code=load.trust_remote_code)
    if is_native_encoder(load):
        if causal:
            raise EncoderizeError(f"{load.source!r} is an encoder; --causal keeps a decoder's causal mask during "
                                  "fine-tuning (an ablation; the paper fine-tunes every model bidirectionally)")
        model, tokenizer = _load_encoder(load)
        mode = "bidirectional"
    else:
        model, tokenizer = _load_decoder(load, causal, target)
        mode = "causal" if causal else "bidirectional"
    tokenizer.padding_side = "right"  # real tokens keep positions 0..n-1
    model.to(target)
    state = {name: tensor.detach().to("cpu", copy=True) for name, tensor in model.state_dict().items()}
    return Backbone(model=model, tokenizer=tokenizer, mode=mode, device=target, initial_state=state)


def _load_encoder(load: LoadConfig):
    from transformers import AutoModel, AutoTokenizer

    kwargs = dict(revision=load.revision, trust_remote_code=load.trust_remote_code, dtype=load.dtype,
                  attn_implementation=None if load.attn_implementation == "auto" else load.attn_implementation)
    try:
        tokenizer = AutoTokenizer.from_pretrained(load.source, revision=load.revision,
                                                  trust_remote_code=load.trust_remote_code)
        try:  # the pooler is never used (mean pooling) and would hold parameters without gradients
            model = AutoModel.from_pretrained(load.source, add_pooling_layer=False, **kwargs)
        except TypeError:  # encoders without a pooler take no `add_pooling_layer`
            model = AutoModel.from_pretrained(load.source, **kwargs)
    except (OSError, ValueError, KeyError, RuntimeError) as err:
        raise EncoderizeError(f"cannot load encoder {load.source!r}: {str(err).strip().splitlines()[0]}") from None
    return model, tokenizer


# Fine-tuning batches are padded to their own width (length-grouped), so each batch has another shape: flex attention
# would compile its kernel for every width. `auto` therefore chooses among flash (on a GPU, where it runs in the bf16
# of `Backbone.autocast`), sdpa and eager here.
EVAL_EXCLUDES = {"flex_attention": "fine-tuning batches are padded to their own width: flex would compile per width"}


def _load_decoder(load: LoadConfig, causal: bool, target: torch.device):
    from hf_encoderize.model.bidirectional import base_model_of, encoderize
    from hf_encoderize.model.loading import load_decoder_trying
    from hf_encoderize.model.tokens import ensure_pad_token

    compute = torch.bfloat16 if target.type == "cuda" else torch.float32  # as `Backbone.autocast` runs it
    full, tokenizer, _ = load_decoder_trying(load, exclude=EVAL_EXCLUDES, compute_dtype=compute)
    if causal:
        ensure_pad_token(tokenizer)  # pads are masked out of attention and pooling; no new embedding row
        full.config.is_causal = True
    else:
        encoderize(full, tokenizer)  # no-op on a saved encoder; patches a raw decoder
    model = base_model_of(full)
    model.config.use_cache = False
    if causal:
        model.config.is_causal = True
    return model, tokenizer
