"""Masked-LM and bidirectional backbone for an encoder converted by hf-encoderize.

Self-contained: imports only torch and transformers, so `trust_remote_code=True` needs nothing else installed.
The classes subclass the original architecture's own transformers classes (named by MODEL_TYPE below), so the
checkpoint's weight names, tied embeddings and attention backends are exactly those of the base model; the only
changes are bidirectional attention and an un-shifted masked-LM loss.
"""

import torch
import transformers
from transformers.modeling_outputs import MaskedLMOutput
from transformers.models.auto.configuration_auto import CONFIG_MAPPING
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_MAPPING_NAMES

MODEL_TYPE = "__MODEL_TYPE__"  # written by hf-encoderize at save time


def make_bidirectional(model: torch.nn.Module) -> tuple[int, int]:
    """Make every attention layer bidirectional, in place. Returns `(modules_patched, causal_buffers_replaced)`.

    1. `config.is_causal = False` on the config and its text sub-configs: transformers >= 5.2 then builds
       bidirectional (and symmetric sliding-window) masks;
    2. `module.is_causal = False` wherever the attribute exists: sdpa (when the mask is skipped) and flash read it;
    3. square lower-triangular bool buffers (hard-coded causal masks, e.g. GPT-Neo) become `B | B^T`.
    """
    for name in ("", "text_config", "decoder", "language_config", "llm_config"):
        config = getattr(model.config, name, None) if name else model.config
        if config is not None and hasattr(config, "to_dict"):
            config.is_causal = False
            if isinstance(getattr(config, "use_bidirectional_attention", None), bool):
                config.use_bidirectional_attention = True  # Gemma 3 style switch
    modules = buffers = 0
    for module in model.modules():
        if isinstance(getattr(module, "is_causal", None), bool):
            module.is_causal = False
            modules += 1
        for name, buffer in list(module.named_buffers(recurse=False)):
            if buffer is None or buffer.dim() < 2 or buffer.shape[-1] != buffer.shape[-2] or buffer.shape[-1] < 2:
                continue
            as_bool = buffer != 0
            if not torch.equal(as_bool.to(buffer.dtype), buffer):
                continue  # not a 0/1 mask (e.g. an additive -inf mask or real weights)
            if torch.equal(as_bool, as_bool.tril()) and not bool(as_bool.all()):
                setattr(module, name, (as_bool | as_bool.transpose(-1, -2)).to(buffer.dtype))
                buffers += 1
    return modules, buffers


if MODEL_TYPE in MODEL_MAPPING_NAMES:  # False when hf_encoderize imports this file unfilled for the patch

    class EncoderModel(getattr(transformers, MODEL_MAPPING_NAMES[MODEL_TYPE])):
        """The bidirectional backbone (hidden states), for `AutoModel` with `trust_remote_code=True`."""

        config_class = CONFIG_MAPPING[MODEL_TYPE]

        def forward(self, *args, **kwargs):
            if not getattr(self, "_bidirectional", False):
                make_bidirectional(self)  # after weight loading, which may re-initialise non-persistent buffers
                self._bidirectional = True
            kwargs["use_cache"] = False
            return super().forward(*args, **kwargs)


    class EncoderForMaskedLM(getattr(transformers, MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[MODEL_TYPE])):
        """Bidirectional encoder with its LM head used as an MLM head (the token at i predicts itself)."""

        config_class = CONFIG_MAPPING[MODEL_TYPE]

        def forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, labels=None,
                    **kw):
            if not getattr(self, "_bidirectional", False):
                make_bidirectional(self)
                self._bidirectional = True
            kw.pop("use_cache", None)
            outputs = super().forward(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                inputs_embeds=inputs_embeds,
                use_cache=False,
                **kw,
            )
            logits = outputs.logits  # (batch, seq, vocab)
            loss = None
            if labels is not None:
                loss = torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1).float(), labels.flatten().to(logits.device), ignore_index=-100
                )
            return MaskedLMOutput(
                loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
            )
