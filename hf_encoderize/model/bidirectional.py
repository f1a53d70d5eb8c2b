"""Make a decoder attend bidirectionally, and prove it did.

The patch (`encoderize`) has three layers, because no single switch covers every architecture:
1. `config.is_causal = False` (and on every sub-config): transformers >= 5.2 then builds bidirectional masks in
   `masking_utils`, with sliding-window layers made symmetric, for eager, sdpa and flex.
2. every module with an `is_causal` attribute gets `False`: sdpa takes `is_causal` from the module when the mask is
   skipped, and the flash kernels always do.
3. hard-coded causal buffers (GPT-Neo's `bias`, and any other square lower-triangular bool buffer) are replaced by
   their symmetric closure `B | B^T`: all-True for global layers, a symmetric band for local layers.

`verify_bidirectional` then checks behaviour, not flags, so a model that is still causal anywhere fails loudly:
1. changing the last token changes the first position's output (end to end, and per attention layer through hooks,
   so one forgotten causal layer is caught too);
2. left and right padding leave the real tokens' outputs unchanged;
3. a document packed next to another gives the same outputs as the document alone (see `isolation`).
A model that passes every check but the third (a hybrid whose state-space / linear-attention layers carry state along
a packed row) is still a correct encoder: it trains on padded rows, one document per row
(`ProbeResult.passed_without_packing`; `encoderize_where_it_trains` decides, `EncoderizeReport.packing` records).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.precision import compute_dtype
from hf_encoderize.model.isolation import document_ids_from_lengths, install_document_isolation, packed_forward
from hf_encoderize.records.run_record import PatchFacts, TokenFacts

PACKING_CHECK = "packed_documents_isolated"
PACKED = "packed"  # `EncoderizeReport.packing` when documents share rows; else "padded rows: <why>"


class NotBidirectionalError(EncoderizeError):
    """The probe found causal (or leaking) attention. `result`: the `ProbeResult` behind it, when the probe ran."""

    def __init__(self, message: str, result: ProbeResult | None = None):
        super().__init__(message)
        self.result = result


@dataclass(frozen=True)
class EncoderizeReport:
    """What `encoderize` changed, for logs and the model card. Frozen: a later step that learns more (the probe, the
    rows' packing) makes a new report with `dataclasses.replace`."""

    model_type: str
    attn_implementation: str
    config_switch: bool
    modules_patched: int
    causal_buffers_replaced: int
    tokens: dict = field(default_factory=dict)
    packing: str = PACKED
    """How training rows are built: "packed" (several isolated documents per row) or "padded rows: <why>" (one
    document per row), e.g. for a hybrid whose state-space layers carry state across packed documents; "not checked
    (--no-verify)" when the probe did not run."""
    attn_candidates: list[dict] = field(default_factory=list)
    """The backends considered, fastest first, each with why it was skipped (None for the one that ran):
    `loading.load_decoder_trying`'s `tried`."""
    probe: str = ""
    """The probe's verdict (`ProbeResult.summary`); empty when it did not run here."""

    def to_dict(self) -> dict:
        return asdict(self)

    def facts(self) -> PatchFacts:
        """The run record's `encoderize` part: this report, its tokens nested (made by keyword: a field the record
        does not declare fails here, when the run is saved)."""
        return PatchFacts(**{**self.to_dict(), "tokens": TokenFacts(**self.tokens)})


def make_bidirectional(model: torch.nn.Module) -> tuple[int, int]:
    """Apply the three-layer patch in place. Returns `(modules_patched, causal_buffers_replaced)`.

    The patch itself lives in the modelling file shipped with every saved encoder, so a reload through
    `trust_remote_code` applies exactly the same code.
    """
    from hf_encoderize.model.remote_code.modeling_encoderize import make_bidirectional as patch

    counts = patch(model)
    install_document_isolation()
    return counts


def encoderize(model, tokenizer=None) -> EncoderizeReport:
    """Make `model` attend bidirectionally, in place; give `tokenizer` pad and mask tokens.

    Works for eager, sdpa, flex_attention and flash_attention_2/3. Returns an `EncoderizeReport`.
    """
    from hf_encoderize.model.kinds import ENCODERIZABLE, classify_config, refusal_message
    from hf_encoderize.model.tokens import ensure_special_tokens

    kind = classify_config(model.config)
    if kind not in ENCODERIZABLE:
        raise EncoderizeError(refusal_message(kind, model.config.model_type))
    modules, buffers = make_bidirectional(model)
    return EncoderizeReport(
        model_type=model.config.model_type,
        attn_implementation=model.config._attn_implementation,
        config_switch=True,
        modules_patched=modules,
        causal_buffers_replaced=buffers,
        tokens=asdict(ensure_special_tokens(model, tokenizer)) if tokenizer is not None else {},
    )


# ---------------------------------------------------------------------------------------------------------- probe


@dataclass
class ProbeResult:
    """Outcome of `verify_bidirectional`: one entry per check, `True` or the reason it failed."""

    checks: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(value is True for value in self.checks.values())

    @property
    def passed_without_packing(self) -> bool:
        """Every check passes except, possibly, packed-document isolation: the model is bidirectional and trains
        correctly on padded rows (one document per row), e.g. a hybrid whose state-space layers carry state along
        a packed row."""
        return all(value is True for name, value in self.checks.items() if name != PACKING_CHECK)

    def failures(self) -> list[str]:
        return [f"{name}: {value}" for name, value in self.checks.items() if value is not True]

    def summary(self) -> str:
        return "passed (" + ", ".join(self.checks) + ")" if self.passed else "; ".join(self.failures())


def last_hidden_state(output) -> torch.Tensor:
    """The final hidden states (B, T, H) of any transformers model output (or the first tuple element)."""
    hidden = getattr(output, "last_hidden_state", None)
    if hidden is None and getattr(output, "hidden_states", None) is not None:
        hidden = output.hidden_states[-1]
    return hidden if hidden is not None else output[0]


def base_model_of(model):
    """The backbone that returns hidden states (LlamaModel inside LlamaForCausalLM, or the model itself)."""
    base = getattr(model, model.base_model_prefix, None) if getattr(model, "base_model_prefix", "") else None
    return base if isinstance(base, torch.nn.Module) else model


def _tolerance(model) -> float:
    """How far two runs that should agree may differ, by the dtype the model computes in: autocast's when it is on
    (fp32 weights under bf16 autocast compute in bf16, where a masked and an unmasked kernel differ by ~1e-2)."""
    return 1e-4 if compute_dtype(next(model.parameters())) == torch.float32 else 3e-2


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> tuple[bool, float]:
    scale = max(1.0, float(b.abs().max()))
    diff = float((a.float() - b.float()).abs().max())
    return diff <= tol * scale, diff


def _attention_modules(model) -> list[tuple[str, torch.nn.Module]]:
    named = [(n, m) for n, m in model.named_modules() if isinstance(getattr(m, "is_causal", None), bool)]
    if not named:
        named = [(n, m) for n, m in model.named_modules() if type(m).__name__.endswith("Attention")]
    # Keep outermost modules only (an attention block can wrap a core attention module).
    return [(n, m) for n, m in named if not any(n.startswith(o + ".") for o, _ in named if o != n)]


def _layer_probe(base, ids: torch.Tensor, tol: float) -> bool | str:
    """Per layer: perturb the attention input at positions > 0 and check the output at position 0 moves."""
    causal_layers = []
    for name, module in _attention_modules(base):
        captured = {}

        def perturb(mod, args, kwargs):
            hidden = kwargs.get("hidden_states", args[0] if args else None)
            if not torch.is_tensor(hidden) or hidden.dim() != 3:
                return None
            noise = torch.randn_like(hidden[:, 1:]) * hidden.abs().mean().clamp_min(1e-3)
            noisy = hidden.clone()
            noisy[:, 1:] += noise
            # Keys and values can come in separately (Inkling's key/value_hidden_states): perturb them the same way.
            extra = {key: torch.cat([kwargs[key][:, :1], kwargs[key][:, 1:] + noise], dim=1)
                     for key in ("key_hidden_states", "value_hidden_states")
                     if torch.is_tensor(kwargs.get(key)) and kwargs[key].shape == hidden.shape}
            if "hidden_states" in kwargs:
                return args, {**kwargs, "hidden_states": noisy, **extra}
            return (noisy, *args[1:]), {**kwargs, **extra}

        def capture(mod, args, kwargs, output, captured=captured):
            out = output[0] if isinstance(output, (tuple, list)) else output
            captured.setdefault("out", []).append(out[:, 0].detach().clone())

        handles = [module.register_forward_hook(capture, with_kwargs=True)]
        try:  # a crash must not leave a hook behind to break every later check
            base(input_ids=ids, use_cache=False)
            handles.append(module.register_forward_pre_hook(perturb, with_kwargs=True))
            base(input_ids=ids, use_cache=False)
        finally:
            for handle in handles:
                handle.remove()
        outs = captured.get("out", [])
        if len(outs) == 2 and _close(outs[0], outs[1], tol * 1e-2)[0]:
            causal_layers.append(name)
    if causal_layers:
        return f"attention at position 0 ignores later tokens in {', '.join(causal_layers[:3])}"
    return True


def _check_later_token(base, ids: torch.Tensor, vocab: int, tol: float) -> bool | str:
    # The latest token position 0 can see: the last one, or the window's edge on sliding-window models.
    window = getattr(base.config.get_text_config(), "sliding_window", None) or ids.shape[1]
    later = min(ids.shape[1], int(window)) - 1
    changed = ids.clone()
    changed[:, later] = (changed[:, later] + 1) % vocab
    first_a = last_hidden_state(base(input_ids=ids, use_cache=False))[:, 0]
    first_b = last_hidden_state(base(input_ids=changed, use_cache=False))[:, 0]
    same, diff = _close(first_a, first_b, tol * 1e-2)
    return f"changing token {later} left position 0 unchanged (max diff {diff:.2e})" if same else True


def _check_padding(base, ids: torch.Tensor, pad_id: int, tol: float) -> bool | str:
    length = ids.shape[1]
    alone = last_hidden_state(base(input_ids=ids, use_cache=False))
    for side in ("right", "left"):
        pads = torch.full((1, 3), pad_id, dtype=ids.dtype, device=ids.device)
        padded = torch.cat([ids, pads] if side == "right" else [pads, ids], dim=1)
        mask = torch.ones_like(padded)
        mask[:, length:] = 0  # right padding: the 3 pads sit at the end
        if side == "left":
            mask = mask.flip(1)
        # Real tokens keep positions 0..n-1 whatever the side (left padding needs explicit position_ids).
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        hidden = last_hidden_state(base(input_ids=padded, attention_mask=mask, position_ids=positions, use_cache=False))
        real = hidden[:, :length] if side == "right" else hidden[:, 3:]
        ok, diff = _close(real, alone, tol)
        if not ok:
            return f"{side} padding changed the real tokens' outputs (max diff {diff:.2e})"
    return True


def _check_packing(base, doc_a: torch.Tensor, doc_b: torch.Tensor, pad_id: int, tol: float) -> bool | str:
    len_a, len_b = doc_a.shape[1], doc_b.shape[1]
    row = torch.cat([doc_a, doc_b, torch.full((1, 2), pad_id, dtype=doc_a.dtype, device=doc_a.device)], dim=1)
    document_ids = document_ids_from_lengths([[len_a, len_b]], row.shape[1])
    packed = last_hidden_state(packed_forward(base, row, document_ids, use_cache=False))
    for name, doc, start in (("first", doc_a, 0), ("second", doc_b, len_a)):
        alone = last_hidden_state(base(input_ids=doc, use_cache=False))
        ok, diff = _close(packed[:, start : start + doc.shape[1]], alone, tol)
        if not ok:
            return f"the {name} packed document differs from the document alone (max diff {diff:.2e}): documents leak"
    return True


@torch.no_grad()
def verify_bidirectional(
    model, *, seq_len: int = 12, pad_token_id: int | None = None, seed: int = 0, raise_on_failure: bool = True
) -> ProbeResult:
    """Run the three behavioural checks on `model` (a CausalLM or its backbone). Raises `NotBidirectionalError`
    naming every failed check unless `raise_on_failure=False`.
    """
    base = base_model_of(model)
    was_training = base.training
    base.eval()
    vocab = int(getattr(model.config.get_text_config(), "vocab_size", 0) or 256)
    generator = torch.Generator().manual_seed(seed)
    device = next(base.parameters()).device
    # Drawn on the host (the generator's device, whatever the default device), then moved to the model's device:
    # every tensor the checks build lives there too, so the probe runs where the model trains (CUDA included).
    ids = torch.randint(min(3, vocab - 1), vocab, (1, seq_len), generator=generator, device="cpu").to(device)
    doc_b = torch.randint(min(3, vocab - 1), vocab, (1, seq_len - 3), generator=generator, device="cpu").to(device)
    pad_id = pad_token_id if pad_token_id is not None else (getattr(model.config, "pad_token_id", None) or 0)
    tol = _tolerance(base)
    result = ProbeResult()
    torch.manual_seed(seed)
    for name, check in (
        ("later_token_changes_first", lambda: _check_later_token(base, ids, vocab, tol)),
        ("every_attention_layer_bidirectional", lambda: _layer_probe(base, ids, tol)),
        ("padding_invariant", lambda: _check_padding(base, ids, pad_id, tol)),
        (PACKING_CHECK, lambda: _check_packing(base, ids, doc_b, pad_id, tol)),
    ):
        try:
            result.checks[name] = check()
        except Exception as err:  # a crash inside the model is a failed check, reported with its reason
            result.checks[name] = f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"
    base.train(was_training)
    if raise_on_failure and not result.passed:
        raise NotBidirectionalError("bidirectionality probe failed: " + "; ".join(result.failures()), result)
    return result
