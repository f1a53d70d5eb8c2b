"""Load saved encoders the way a user without hf_encoderize would, and report per backend what holds, as JSON.

Run as a script, never imported by the package: `python roundtrip_check.py FOLDER [FOLDER ...]` (or `-` to read a
JSON list of folders from stdin), optionally `--backends sdpa,eager,flex_attention`. `hf_encoderize` is made
unimportable before transformers is imported, so a folder that silently depends on it fails here. One process checks
many folders (the architecture matrix hands it all of them at once); prints one JSON line per folder as it finishes.

Per folder, with plain transformers only:
- `default`: `AutoModel.from_pretrained(folder)` with no backend named (what most users type): which backend it
  picks and whether it is bidirectional.
- per backend (`attn_implementation=...`; "unsupported" when transformers offers no such kernel for the class):
  - `bidirectional`: changing a later token changes position 0, with no mask and with an all-ones mask (transformers
    skips the mask then, and sdpa/flash fall back to an `is_causal` flag);
  - `padding`: right padding (the saved tokenizer's side) and left padding with position ids leave the real tokens'
    outputs unchanged;
  - `packing`: two documents packed in one row with restarted position ids and a block-diagonal 4-D mask (a bool mask
    for sdpa, an additive one for eager, a `BlockMask` for flex) give each document's outputs alone; "n/a: ..." when
    the class does not accept such a mask at all (BLOOM's ALiBi path), which is not a bidirectionality question.
  A backend that cannot run on this machine (attention sinks under flex on CPU) is "unsupported" with the reason.
- `remote_automodel`: `AutoModel.from_pretrained(folder, trust_remote_code=True)` is the shipped, patched backbone and
  is bidirectional.
- `fill_mask`: `AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True)` in a fill-mask pipeline, and
  its logits at position 0 move when the last token changes (the shipped module's patch).
- `sentence_transformers`: `SentenceTransformer(folder)` embeddings equal mean pooling over `AutoModel`'s outputs.
- `declared_causal`: the backends the saved config says plain transformers leaves causal for this class
  (`hf_encoderize.plain_attention` in config.json), so a caller can tell a declared limit from a surprise.

A check is `true` or the reason it failed. Sliding-window and chunked models are checked with documents no longer than
the window, where windowed and full attention agree.
"""

import json
import sys

import torch

BACKENDS = ("sdpa", "eager", "flex_attention")
TOLERANCE = 1e-4


def _hidden(model, **inputs):
    with torch.no_grad():
        return model(**inputs, use_cache=False).last_hidden_state


def _close(a, b):
    diff = float((a - b).abs().max())
    return diff <= TOLERANCE * max(1.0, float(b.abs().max())), diff


def _window(config) -> int | None:
    text = config.get_text_config()
    sizes = [getattr(text, key, None) for key in ("sliding_window", "attention_chunk_size", "window_size")]
    sizes = [int(size) for size in sizes if isinstance(size, int) and size > 0]
    return min(sizes) if sizes else None


def _ids(vocab: int, length: int, seed: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(min(5, vocab - 1), vocab, (1, length), generator=generator)


def _moved(diff: float, reference) -> bool:
    """A later token changed this output. Same shapes run the same kernels, so a causal model gives exactly the same
    output (diff 0); a tiny random hybrid moves position 0 by only ~1e-6 through its one attention layer, far below
    the equality tolerance, so "moved" has its own, much smaller threshold."""
    return diff > 1e-8 * max(1.0, float(reference.abs().max()))


def _check_bidirectional(model, ids, vocab, window) -> bool | str:
    later = min(ids.shape[1], window or ids.shape[1]) - 1
    changed = ids.clone()
    changed[0, later] = (changed[0, later] + 1) % vocab
    for mask in (None, torch.ones_like(ids)):
        extra = {} if mask is None else {"attention_mask": mask}
        first = _hidden(model, input_ids=ids, **extra)[0, 0]
        diff = float((first - _hidden(model, input_ids=changed, **extra)[0, 0]).abs().max())
        if diff != diff or not torch.isfinite(first).all():
            return "non-finite outputs (NaN/inf)"
        same = not _moved(diff, first)
        if same:
            how = "no mask" if mask is None else "an all-ones mask"
            return f"causal: changing token {later} left position 0 unchanged with {how} (max diff {diff:.1e})"
    return True


def _check_padding(model, ids, pad_id) -> bool | str:
    alone = _hidden(model, input_ids=ids)
    length = ids.shape[1]
    for side in ("right", "left"):
        pads = torch.full((1, 3), pad_id, dtype=ids.dtype)
        row = torch.cat([ids, pads] if side == "right" else [pads, ids], dim=1)
        mask = torch.zeros_like(row)
        mask[:, :length] = 1
        mask = mask if side == "right" else mask.flip(1)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        hidden = _hidden(model, input_ids=row, attention_mask=mask, position_ids=positions)
        ok, diff = _close(hidden[:, :length] if side == "right" else hidden[:, 3:], alone)
        if not ok:
            return f"{side} padding changed the real tokens' outputs (max diff {diff:.1e})"
    return True


def _packed_mask(lengths: list[int], backend: str, dtype):
    documents = torch.cat([torch.full((n,), i) for i, n in enumerate(lengths)])
    same = documents[:, None] == documents[None, :]
    if backend == "flex_attention":
        from torch.nn.attention.flex_attention import create_block_mask

        def mask_mod(batch, head, q, kv):
            return documents[q] == documents[kv]

        return create_block_mask(mask_mod, 1, None, len(documents), len(documents), device="cpu")
    if backend == "eager":
        return torch.zeros(same.shape, dtype=dtype).masked_fill(~same, torch.finfo(dtype).min)[None, None]
    return same[None, None]


def _check_packing(model, backend, doc_a, doc_b) -> bool | str:
    row = torch.cat([doc_a, doc_b], dim=1)
    positions = torch.cat([torch.arange(doc_a.shape[1]), torch.arange(doc_b.shape[1])])[None]
    dtype = next(model.parameters()).dtype
    mask = _packed_mask([doc_a.shape[1], doc_b.shape[1]], backend, dtype)
    packed = _hidden(model, input_ids=row, attention_mask=mask, position_ids=positions)
    for name, doc, start in (("first", doc_a, 0), ("second", doc_b, doc_a.shape[1])):
        ok, diff = _close(packed[:, start : start + doc.shape[1]], _hidden(model, input_ids=doc))
        if not ok:
            return f"the {name} packed document differs from the document alone (max diff {diff:.1e})"
    return True


def _reason(err: BaseException) -> str:
    return f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"


def _run(check) -> bool | str:
    try:
        return check()
    except Exception as err:  # a crash is a failed check, with its reason
        return _reason(err)


def check_backend(folder: str, backend: str | None, vocab: int, pad_id: int) -> dict:
    from transformers import AutoModel

    kwargs = {} if backend is None else {"attn_implementation": backend}
    try:
        model = AutoModel.from_pretrained(folder, **kwargs).eval()
    except Exception as err:
        unsupported = ("does not support an attention implementation" in str(err) or "does not support" in str(err)
            and "attention" in str(err).lower())
        return {"loaded": "unsupported" if unsupported else _reason(err)}
    window = _window(model.config)
    # Documents no longer than the window: windowed and full attention then agree, so "alone" is well defined.
    length = min(10, window) if window else 10
    ids = _ids(vocab, length, seed=1)
    report = {"loaded": True, "backend": model.config._attn_implementation,
              "bidirectional": _run(lambda: _check_bidirectional(model, ids, vocab, window)),
              "padding": _run(lambda: _check_padding(model, ids, pad_id))}
    if backend is not None:
        # Not 8 tokens: torch 2.13's compiled CPU flex_attention returns wrong outputs (NaN through a model) at a
        # sequence length of exactly 8 on an AVX2 CPU (no AVX-512), with any mask, in plain torch: 0.93 off sdpa,
        # against 2e-7 at 7, 9 and 16 (`flex_attention(q, k, v, block_mask=...)` under torch.compile). A torch bug,
        # not the encoder's; the second document had 8 tokens here, so on such a CPU the check failed on it.
        doc_b = _ids(vocab, max(2, length - 2) if window else length - 1, seed=2)
        try:
            report["packing"] = _check_packing(model, backend, ids, doc_b)
        except Exception as err:  # the class rejects a user-built 4-D mask / BlockMask: nothing to check, say why
            report["packing"] = f"n/a: the class does not take a packed mask ({_reason(err)[:120]})"
    if any(isinstance(v, str) and "cannot be run on CPU" in v for v in report.values()):
        return {"loaded": "unsupported", "why": "not on this machine: " + report["bidirectional"][:160]}
    return report


def _check_fill_mask(folder: str, tokenizer, vocab: int) -> bool | str:
    from transformers import AutoModelForMaskedLM, pipeline

    mlm = AutoModelForMaskedLM.from_pretrained(folder, trust_remote_code=True).eval()
    words = [t for t in list(tokenizer.get_vocab())[:50] if t not in tokenizer.all_special_tokens][:4]
    text = " ".join([*words[:2], tokenizer.mask_token, *words[2:]])
    predictions = pipeline("fill-mask", model=mlm, tokenizer=tokenizer)(text, top_k=2)
    if len(predictions) != 2:
        return f"fill-mask gave {len(predictions)} predictions, not 2"
    ids = _ids(vocab, 8, seed=3)
    changed = ids.clone()
    changed[0, -1] = (changed[0, -1] + 1) % vocab
    with torch.no_grad():
        first = mlm(input_ids=ids).logits[0, 0]
        diff = float((first - mlm(input_ids=changed).logits[0, 0]).abs().max())
    if diff != diff or not torch.isfinite(first).all():
        return "non-finite logits (NaN/inf)"
    return True if _moved(diff, first) else f"causal: the MLM's position 0 ignores the last token (max diff {diff:.1e})"


def _check_remote_automodel(folder: str, vocab: int) -> bool | str:
    from transformers import AutoModel

    model = AutoModel.from_pretrained(folder, trust_remote_code=True).eval()
    if type(model).__name__ != "EncoderModel":
        return f"trust_remote_code=True loaded {type(model).__name__}, not the shipped EncoderModel"
    ids = _ids(vocab, 8, seed=4)
    return _check_bidirectional(model, ids, vocab, _window(model.config))


def _check_sentence_transformers(folder: str, tokenizer) -> bool | str:
    from sentence_transformers import SentenceTransformer
    from transformers import AutoModel

    words = [t for t in list(tokenizer.get_vocab())[:50] if t not in tokenizer.all_special_tokens]
    sentences = [" ".join(words[:3]), " ".join(words[3:9])]
    embeddings = SentenceTransformer(folder, device="cpu").encode(sentences, convert_to_tensor=True).cpu()
    model = AutoModel.from_pretrained(folder).eval()
    batch = tokenizer(sentences, padding=True, return_tensors="pt")
    hidden = _hidden(model, **batch)
    weights = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    manual = (hidden * weights).sum(1) / weights.sum(1)
    ok, diff = _close(embeddings, manual)
    return True if ok else f"embeddings differ from mean pooling over AutoModel (max diff {diff:.1e})"


def check_folder(folder: str, backends=BACKENDS) -> dict:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder)
    except Exception as err:
        return {"tokenizer": _reason(err)}
    vocab = min(len(tokenizer), 200)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    with open(f"{folder}/config.json") as handle:
        declared = (json.load(handle).get("hf_encoderize") or {}).get("plain_attention") or {}
    # Backends the saver found causal in plain transformers for this class, and said so in the config and card.
    report = {"declared_causal": sorted(b for b, verdict in declared.items() if verdict is False),
              "default": check_backend(folder, None, vocab, pad_id)}
    for backend in backends:
        print(json.dumps({"folder": folder, "started": backend}), flush=True)  # names the culprit of a native crash
        report[backend] = check_backend(folder, backend, vocab, pad_id)
    report["remote_automodel"] = _run(lambda: _check_remote_automodel(folder, vocab))
    report["fill_mask"] = _run(lambda: _check_fill_mask(folder, tokenizer, vocab))
    report["sentence_transformers"] = _run(lambda: _check_sentence_transformers(folder, tokenizer))
    return report


def main(argv: list[str]) -> None:
    """Print one JSON line per folder, `{"folder": ..., "seconds": ..., "report": {...}}`, as each is checked (flushed),
    so a caller keeps every finished report even if a later folder kills the process."""
    import time
    import warnings

    from transformers.utils import logging

    logging.set_verbosity_error()
    warnings.simplefilter("ignore")
    # torch 2.13's CPU flex-attention template fails to compile once dynamo turns a recompile dynamic (a C++ codegen
    # error: "cur_qSplitSize8 was not declared"); static shapes compile once per shape and hit the cache across folders.
    torch._dynamo.config.automatic_dynamic_shapes = False
    torch._dynamo.config.cache_size_limit = 64
    backends = BACKENDS
    if "--backends" in argv:
        at = argv.index("--backends")
        backends = tuple(argv[at + 1].split(","))
        argv = argv[:at] + argv[at + 2 :]
    folders = json.load(sys.stdin) if argv == ["-"] else argv
    for folder in folders:
        print(json.dumps({"folder": folder, "started": "loading"}), flush=True)
        start = time.perf_counter()
        report = check_folder(folder, backends)
        print(json.dumps({"folder": folder, "seconds": round(time.perf_counter() - start, 2), "report": report}),
              flush=True)


if __name__ == "__main__":
    sys.modules["hf_encoderize"] = None  # any `import hf_encoderize` now raises ImportError (transformers loads later)
    main(sys.argv[1:])
