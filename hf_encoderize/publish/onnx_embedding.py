"""The ONNX graph of the whole embedding pipeline: token states, the model's own pooling, its Dense/Normalize modules.

Design choices:
- One graph, two outputs: `last_hidden_state` first (where sentence-transformers' ONNX backend reads the token
  states, so `onnx/model.onnx` keeps its layout) and `sentence_embedding`, what `SentenceTransformer(folder).encode`
  returns for the same token ids. A snippet that pools the token states itself missed the lead-token rule and read
  cosine 0.77-0.94 to sentence-transformers; the pooled output makes ONNX Runtime give the model's own embedding.
- The pooling is sentence-transformers' own `Pooling` module, traced, fed a mask with the prompt left out the way
  `Pooling(include_prompt=False)` leaves it out (`_exclude_prompt_from_mask`): the first `prompt_length` real tokens,
  after any left padding. `prompt_length` is fixed at export for the default prompt (a contrastive model's lead
  tokens): ONNX Runtime's caller puts the same prompt text before every text, as `encode` does.
- Modules after the pooling (Normalize, Dense) are traced as they are; any other module is refused, since the
  graph would then not be what `encode` returns.
- The graph comes from `torch.onnx.export(dynamo=True)` (torch.export and onnxscript, the exporter PyTorch keeps;
  batch and sequence are `torch.export.Dim`s), and from the TorchScript tracer (`dynamo=False`, which PyTorch is
  deprecating) only as a fallback: `publish.export` tries them in `EXPORTERS` order and keeps the first whose fp32
  graph verifies, recording which ran and why the first did not.
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import Literal

from hf_encoderize.common.errors import EncoderizeError

TRACEABLE_AFTER_POOLING = ("Normalize", "Dense")
Exporter = Literal["dynamo", "torchscript"]
EXPORTERS: tuple[Exporter, ...] = ("dynamo", "torchscript")  # tried in this order; the second is the fallback


def default_prompt(st) -> str:
    """The prompt `encode` puts before every text when none is named (a contrastive model's lead tokens), or ''."""
    name = getattr(st, "default_prompt_name", None)
    return (getattr(st, "prompts", None) or {}).get(name, "") if name else ""


def prompt_length(st, prompt: str) -> int:
    """Tokens of `prompt` that `Pooling(include_prompt=False)` leaves out: the prompt's tokens less a trailing special
    token (sentence-transformers counts that one as text). 0 when the pooling includes the prompt."""
    if not prompt or getattr(st[1], "include_prompt", True):
        return 0
    ids = st.tokenizer([prompt])["input_ids"][0]
    return len(ids) - (1 if ids and ids[-1] in st.tokenizer.all_special_ids else 0)


def export_embedding_graph(st, path: Path, opset: int, exporter: Exporter = "dynamo") -> dict:
    """Write the pipeline's graph to `path` with `exporter`; returns what a caller must know to feed it: the prompt
    and its skip, the modules and the exporter."""
    import torch

    tail = [type(module).__name__ for module in list(st)[2:]]
    if any(name not in TRACEABLE_AFTER_POOLING for name in tail):
        raise EncoderizeError(f"export: the model has module(s) {', '.join(tail)} after its pooling; only "
                              f"{', '.join(TRACEABLE_AFTER_POOLING)} go into the ONNX graph")
    prompt = default_prompt(st)
    skip = prompt_length(st, prompt)
    graph = _Pipeline(st, skip).eval()
    # Trace on a padded batch of 2 x 6 so the graph keeps the attention-mask path (a 1-row unpadded trace may drop it).
    vocab = len(st.tokenizer)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]]) % vocab
    mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]])
    names = dict(input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state", "sentence_embedding"])
    # Both exporters warn about what they turn into constants (shapes, the prompt's skip) and log what they register:
    # expected, and what matters is checked after, on ONNX Runtime, against PyTorch's embeddings. Shown with -v.
    quiet = not logging.getLogger("hf_encoderize").isEnabledFor(logging.DEBUG)
    with torch.no_grad(), warnings.catch_warnings(), _quiet_loggers(quiet):
        if quiet:
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", category=UserWarning, module=r"torch\.(onnx|export|_export|fx)")
            warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.")
        if exporter == "dynamo":
            batch, sequence = torch.export.Dim("batch"), torch.export.Dim("sequence")
            torch.onnx.export(graph, (ids, mask), str(path), dynamo=True, opset_version=opset, external_data=False,
                              dynamic_shapes=({0: batch, 1: sequence}, {0: batch, 1: sequence}), verbose=False,
                              **names)
        else:
            axes = {0: "batch", 1: "sequence"}
            torch.onnx.export(graph, (ids, mask), str(path), dynamo=False, opset_version=opset, **names,
                              dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes,
                                            "sentence_embedding": {0: "batch"}})
    return {"prompt": prompt, "prompt_length": skip, "modules": ["Pooling", *tail], "exporter": exporter}


class _quiet_loggers:  # noqa: N801  (a context manager used like a function)
    """torch.onnx's exporter logs its registrations at WARNING (`torchvision is not installed. Skipping ...`)."""

    NAMES = ("torch.onnx", "torch.export", "torch._export", "torch.fx.experimental.symbolic_shapes", "onnxscript")

    def __init__(self, active: bool):
        self.active, self.levels = active, {}

    def __enter__(self):
        if self.active:
            for name in self.NAMES:
                self.levels[name] = logging.getLogger(name).level
                logging.getLogger(name).setLevel(logging.ERROR)

    def __exit__(self, *exc):
        for name, level in self.levels.items():
            logging.getLogger(name).setLevel(level)


def _pipeline_class():
    import torch

    class Pipeline(torch.nn.Module):
        """input_ids, attention_mask (batch, seq) -> token states (batch, seq, dim), embedding (batch, out_dim)."""

        def __init__(self, st, skip: int):
            super().__init__()
            self.model, self.pooling, self.tail = st[0].auto_model, st[1], torch.nn.ModuleList(list(st)[2:])
            self.skip = skip

        def forward(self, input_ids, attention_mask):
            hidden = self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            pooled_mask = attention_mask
            if self.skip:  # as _exclude_prompt_from_mask: positions before (left padding + prompt) are left out
                first = attention_mask.to(torch.int32).argmax(dim=1, keepdim=True)  # (batch, 1)
                positions = torch.arange(attention_mask.shape[1], device=attention_mask.device).unsqueeze(0)
                pooled_mask = attention_mask * (positions >= first + self.skip).to(attention_mask.dtype)
            features = self.pooling({"token_embeddings": hidden, "attention_mask": pooled_mask})
            for module in self.tail:
                features = module(features)
            return hidden, features["sentence_embedding"]

    return Pipeline


def _Pipeline(st, skip: int):  # noqa: N802  (torch is imported lazily, so the class is built on first use)
    return _pipeline_class()(st, skip)


# The transformer blocks an int8 export keeps in fp32. A decoder-born model writes its massive activations (values in
# the thousands on a few channels) in its first blocks, and 8-bit weights there move everything after: on a SmolLM2-135M
# embedding model, weight-only int8 everywhere read min cosine 0.969 to PyTorch on the 24 check texts (blocks of 16:
# 0.982; fp32 down_proj everywhere: 0.967; fp32 attention: 0.946), and with blocks 0 and 1 in fp32 0.994, in a file of
# 243 MiB against fp32's 514 (all int8: 223).
FP32_BLOCKS = 2
_BLOCK = re.compile(r"/(?:layers|layer|h|blocks|block)\.(\d+)/")
_SCOPED_BLOCK = re.compile(r"[./](?:layers|layer|h|blocks|block)\.(\d+)(?:[:/]|$)")


def _scope(node) -> str:
    """Where a node sits in the module tree: its name (TorchScript: `/model/layers.3/...`), else the dynamo
    exporter's `namespace` metadata (`.../model.layers.3: ...`)."""
    namespace = next((p.value for p in node.metadata_props if p.key == "namespace"), "")
    return f"{node.name}/{namespace}"


def fp32_block_matmuls(model) -> list[str]:
    """Names of the MatMul nodes of `model` (an onnx ModelProto) inside its first FP32_BLOCKS transformer blocks;
    none for a model of fewer than 8 blocks (there the int8 file would hardly be int8 at all)."""
    blocks = {}
    for node in model.graph.node:
        found = _BLOCK.search(node.name) or _SCOPED_BLOCK.search(_scope(node))
        if node.op_type == "MatMul" and found:
            blocks.setdefault(int(found.group(1)), []).append(node.name)
    if len(blocks) < 8:
        return []
    return [name for index in sorted(blocks)[:FP32_BLOCKS] for name in blocks[index]]
