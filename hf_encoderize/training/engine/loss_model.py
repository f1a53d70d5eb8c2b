"""The model the engine trains: backbone + LM head -> the summed cross-entropy over labelled positions.

Design choices:
- Accelerate wraps this module whole (DDP/FSDP/DeepSpeed), so the wrapped module's forward, and its gradient hooks,
  is what runs; the training loop never calls the backbone itself.
- A decoder's LM head runs only on the labelled positions, through the fused linear + cross-entropy
  (`objectives.loss.mlm_loss`) or the kernel `objectives.loss_kernels` chose for the run's shape; a native encoder's
  MLM head has a transform before its decoder, so its whole masked-LM model runs.
- What Accelerate reads off the prepared object (FSDP2's wrap policy, tied embeddings) is delegated to the wrapped
  transformers model, so sharding sees the model's own layers and ties.
"""

from __future__ import annotations

import torch

from hf_encoderize.model.isolation import packed_forward
from hf_encoderize.objectives.loss import mlm_loss
from hf_encoderize.training.profiling import section


class LossModel(torch.nn.Module):
    """Backbone + LM head -> summed cross-entropy over labelled positions. Wrapped whole by Accelerate (DDP/FSDP).

    `forward` returns `(loss_sum, correct)`: the fp32 cross-entropy summed over labelled positions (the engine divides
    by the labelled tokens of the global batch) and, detached, how many of them the arg-max predicts right (a device
    tensor, so the training step needs no extra host sync)."""

    def __init__(self, model):
        from hf_encoderize.model.kinds import ENCODER, classify_config

        super().__init__()
        self.model = model
        self.native_encoder = classify_config(model.config) == ENCODER

    # What Accelerate reads off the prepared object, delegated to the wrapped transformers model: FSDP2's transformer
    # wrap policy reads `_no_split_modules` (without it the whole model is one FSDP unit), and FSDP2's
    # `cpu_ram_efficient_loading` re-ties embeddings through `tie_weights`/`get_*_embeddings` after moving the model
    # to meta (without them a tied LM head becomes a separate parameter the optimizer never sees).
    @property
    def _no_split_modules(self):
        return getattr(self.model, "_no_split_modules", None)

    @property
    def _tied_weights_keys(self):
        keys = getattr(self.model, "_tied_weights_keys", None)
        if isinstance(keys, dict):
            return {f"model.{k}": f"model.{v}" for k, v in keys.items()}
        return [f"model.{k}" for k in keys] if keys else keys

    def tie_weights(self, *args, **kwargs):
        return self.model.tie_weights(*args, **kwargs)

    def get_input_embeddings(self):
        return self.model.get_input_embeddings()

    def get_output_embeddings(self):
        return self.model.get_output_embeddings()

    def forward(self, batch: dict, with_accuracy: bool = False, kernel=None):
        """`batch`: one micro-batch on the device (`prepare_step`): masked `input_ids`, `document_ids`, `labels`, the
        flat `index` and `targets` of the labelled positions, and the packed-attention inputs. `kernel`: the fused
        linear + cross-entropy the run chose (`Run.loss_kernel`; None: ours)."""
        from hf_encoderize.model.bidirectional import base_model_of, last_hidden_state

        packed = batch["packed"]
        if self.native_encoder:
            # A native encoder: its MLM head has a transform before the decoder, so run the whole masked-LM model.
            logits = packed_forward(self.model, batch["input_ids"], batch["document_ids"], packed=packed).logits
            logits = logits.reshape(-1, logits.shape[-1]).index_select(0, batch["index"]).float()
            loss = torch.nn.functional.cross_entropy(logits, batch["targets"], reduction="sum")
            return loss, (logits.detach().argmax(-1) == batch["targets"]).sum()
        with section("forward"):
            output = packed_forward(base_model_of(self.model), batch["input_ids"], batch["document_ids"],
                                    packed=packed, use_cache=False)
        with section("loss"):
            loss, correct = mlm_loss(last_hidden_state(output), self.model.get_output_embeddings(), batch["index"],
                                     batch["targets"], with_accuracy=with_accuracy, kernel=kernel)
        return loss, correct if correct is not None else torch.zeros((), dtype=torch.long, device=loss.device)
