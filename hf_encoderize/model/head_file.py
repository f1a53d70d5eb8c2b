"""The MLM head of a saved encoder lives in its own file, so a plain `AutoModel.from_pretrained` loads in silence.

Design choices:
- A decoder-made encoder is saved as its causal-LM class (`LlamaForCausalLM`: backbone + `lm_head`). A plain
  `AutoModel.from_pretrained(out)` builds the backbone alone (`LlamaModel`), and an untied `lm_head.weight` in
  model.safetensors is then an unexpected key: transformers prints a LOAD REPORT table ("UNEXPECTED ... not ok if you
  expect identical arch") on every load, in every client. The native class cannot be told to ignore it (its
  `_keys_to_ignore_on_load_unexpected` is transformers' code), so the head is not in model.safetensors at all: it is
  written to `lm_head.safetensors` beside it, and the loaders that want the head read it from there (the shipped
  `EncoderForMaskedLM.from_pretrained`, whose copy of `load_head` is in remote_code/modeling_encoderize.py, and
  `model.loading` for a cpt that continues from a saved encoder). A tied head is not saved at all (it is the
  embedding), so there is nothing to move. Sharded checkpoints (model.safetensors.index.json) are handled the same way.
- llama.cpp's converter and sentence-transformers read `model*.safetensors` / the backbone only: the head file is
  invisible to both, as it should be for embeddings.
"""

from __future__ import annotations

import json
from pathlib import Path

HEAD_FILE = "lm_head.safetensors"
HEAD_PREFIX = "lm_head."


def split_head(folder: Path) -> list[str]:
    """Move the `lm_head.*` tensors of the checkpoint in `folder` into HEAD_FILE; returns the keys moved."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    index = folder / "model.safetensors.index.json"
    shards = (sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file()
        else ["model.safetensors"])
    head, moved = {}, []
    for shard in shards:
        path = folder / shard
        if not path.is_file():
            continue
        with safe_open(str(path), "pt") as handle:
            keys = list(handle.keys())
            if not any(key.startswith(HEAD_PREFIX) for key in keys):
                continue
            metadata = handle.metadata() or {"format": "pt"}
            tensors = {key: handle.get_tensor(key) for key in keys}
        head.update({key: tensors.pop(key) for key in keys if key.startswith(HEAD_PREFIX)})
        save_file(tensors, str(path), metadata=metadata)
    if not head:
        return []
    save_file(head, str(folder / HEAD_FILE), metadata={"format": "pt"})
    moved = sorted(head)
    if index.is_file():
        payload = json.loads(index.read_text())
        payload["weight_map"] = {k: v for k, v in payload["weight_map"].items() if not k.startswith(HEAD_PREFIX)}
        index.write_text(json.dumps(payload, indent=2) + "\n")
    return moved


def head_path(source: str, revision: str | None = None) -> str | None:
    """The head file of a saved encoder (a local folder or a Hub repo), or None when it has none (a tied head, a
    decoder, an encoder saved before the head had its own file)."""
    local = Path(source)
    if local.is_dir():
        return str(local / HEAD_FILE) if (local / HEAD_FILE).is_file() else None
    try:
        from transformers.utils import cached_file

        return cached_file(source, HEAD_FILE, revision=revision, _raise_exceptions_for_missing_entries=False,
                           _raise_exceptions_for_connection_errors=False)
    except OSError:  # a repo id that is no repo: the load itself reports it in its own words
        return None


def load_head(model, path: str) -> None:
    """Copy the head tensors of `path` into `model` (dtype and device follow the model's own parameters)."""
    from safetensors.torch import load_file

    own = dict(model.named_parameters())
    for key, tensor in load_file(path).items():
        if key in own:
            own[key].data.copy_(tensor.to(device=own[key].device, dtype=own[key].dtype))
