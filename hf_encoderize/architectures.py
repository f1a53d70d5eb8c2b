"""The architecture matrix: every model type the installed transformers maps to `AutoModelForCausalLM`, classified,
built tiny, encoderized and probed under sdpa and eager (packing included).

Design choices:
- Nothing is hand-listed as "supported": the list comes from `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`, so a new
  transformers release is covered (or honestly reported) the day it is installed.
- Tiny configs are derived from each architecture's own default config by shrinking the size fields it has
  (2 layers, hidden 32, 4 heads, small sliding windows so that windowed layers are really exercised). Layer-type
  patterns keep one layer of every kind, so alternating local/global models test both.
- A failure is recorded with its exact reason (the probe check that failed, or the exception) rather than hidden.
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
from dataclasses import KW_ONLY, asdict, dataclass, field
from pathlib import Path

from hf_encoderize.loading import ENCODERIZABLE, HYBRID, classify_config

BACKENDS = ("sdpa", "eager")
PASS = "pass"
# A hybrid whose only failing check is packed-document isolation trains on padded rows (one document per row), which
# the probe's other checks cover, so it counts as passing: cells starting with PASS pass.
PADDED_ROWS = "pass (padded rows: packed documents leak through the state-space layers)"
UNSUPPORTED = "n/a: transformers offers no such kernel for this model"

# Size fields shrunk when the default config has them. Values keep head_dim = 32 / 4 = 8.
_TINY = {
    "hidden_size": 32, "n_embd": 32, "d_model": 32, "embed_dim": 32, "dim": 32, "model_dim": 32,
    "num_hidden_layers": 2, "n_layer": 2, "num_layers": 2, "n_layers": 2,
    "num_attention_heads": 4, "n_head": 4, "n_heads": 4, "num_heads": 4,
    "num_key_value_heads": 2, "n_kv_heads": 2, "num_kv_heads": 2, "multi_query_group_num": 2,
    "head_dim": 8, "kv_channels": 8, "attention_head_dim": 8,
    "intermediate_size": 64, "n_inner": 64, "ffn_dim": 64, "ffn_hidden_size": 64, "d_ff": 64,
    "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32, "expert_intermediate_size": 32,
    "num_experts": 4, "num_local_experts": 4, "n_routed_experts": 4, "moe_num_experts": 4,
    "num_experts_per_tok": 2, "moe_topk": 2, "n_shared_experts": 1, "n_group": 1, "topk_group": 1,
    "kv_lora_rank": 16, "q_lora_rank": 16, "qk_rope_head_dim": 4, "qk_nope_head_dim": 4, "v_head_dim": 8,
    "vocab_size": 256, "max_position_embeddings": 128, "n_positions": 128, "n_ctx": 128, "seq_length": 128,
    "rotary_dim": 4, "sliding_window": 4, "window_size": 4, "attention_chunk_size": 4, "first_k_dense_replace": 1,
    "moe_k": 2,
    # state-space / linear-attention parts of hybrids
    "mamba_n_heads": 8, "mamba_d_head": 8, "mamba_headdim": 8, "mamba_d_state": 8, "mamba_n_groups": 1,
    "ssm_state_size": 8, "n_groups": 1, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "linear_key_head_dim": 8, "linear_value_head_dim": 8,
    # per-layer input embeddings (Gemma 3n / 4), shared experts, sparse-attention indexers
    "vocab_size_per_layer_input": 256, "hidden_size_per_layer_input": 8, "shared_experts_intermediate_size": 32,
    "index_head_dim": 8, "index_n_heads": 2, "num_experts_per_token": 2, "num_expert_group": 1,
    "linear_head_dim": 8, "linear_num_heads": 4,
}  # fmt: skip
_MAX_TINY_PARAMS = 20_000_000


@dataclass
class ArchitectureResult:
    model_type: str
    kind: str
    backends: dict = field(default_factory=dict)
    """backend -> "pass", PADDED_ROWS, or the exact reason it failed."""
    checks: dict = field(default_factory=dict)
    """backend -> {probe check: True or the reason it failed}, for every backend the probe ran under."""
    roundtrip: str | None = None
    """The round-trip cell (`roundtrip.summary`), or None when it was not run."""
    roundtrip_report: dict = field(default_factory=dict)
    """Everything the fresh process found (`roundtrip_check.py`), for the JSON output."""

    @property
    def probe_passed(self) -> bool:
        """Passes the in-process probe under every backend transformers offers for it (at least one)."""
        offered = [v for v in self.backends.values() if v != UNSUPPORTED]
        return bool(offered) and all(v.startswith(PASS) for v in offered)

    @property
    def passed(self) -> bool:
        """Passes the probe and, where it was run, the round trip through plain transformers."""
        return self.probe_passed and (self.roundtrip is None or self.roundtrip.startswith(PASS))


def causal_lm_model_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _pattern(layer_types: list) -> list:
    """Keep one layer of each kind (first occurrence order), at least two layers."""
    kinds = list(dict.fromkeys(layer_types))
    return kinds if len(kinds) >= 2 else kinds * 2


# Fields that list one entry per layer, under their various names (`layer_types` is the modern one).
_LAYER_PATTERN_FIELDS = ("layer_types", "layers_block_type", "block_types")

# Per-family fixes the generic shrinking cannot infer; each says why.
_FAMILY = {  # fmt: skip
    # hybrids whose defaults put no attention layer in the first two layers: position 0 would see nothing later
    "bamba": {"attn_layer_indices": [1]},
    "jamba": {"attn_layer_period": 2, "attn_layer_offset": 1},
    # Zamba ties every hybrid layer's shared transformer to the first one's and fails when there is no second one
    "zamba": {"layers_block_type": ["linear_attention", "hybrid", "hybrid"], "num_hidden_layers": 3},
    "granitemoehybrid": {"layer_types": ["linear_attention", "full_attention"]},  # the default has no attention
    # Mamba heads must tile the Mamba inner size (2 x hidden, or mamba_d_ssm)
    "falcon_h1": {"mamba_d_ssm": 64, "mamba_n_heads": 8, "mamba_d_head": 8},
    "zaya": {"num_experts_per_tok": 1},  # ZAYA supports top-1 routing only
    # the sparse-attention indexer has no defaults; a budget of 16 tokens covers the probe's 12-token rows
    "qwen4_exp_text": {
        "indexer_n_heads": 2, "indexer_kv_heads": 1, "indexer_head_dim": 8, "indexer_budget": 16,
        "indexer_compress_ratio": 4, "hc_lowrank": 8,
    },
    "lfm2_moe": {"layer_types": ["conv", "full_attention"], "num_dense_layers": 1},  # the default derives none
    "lfm2": {"layer_types": ["conv", "full_attention"]},  # the derived pattern has no conv layer at 2 layers
    # per-layer-type rotary parameters are read by layer type, and the default config has none
    "cohere_compass_text": {
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            kind: {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 1, 1]}
            for kind in ("sliding_attention", "full_attention")
        },
    },
    # the last 15 layers share earlier layers' KV caches, and the sparsity pattern lists 35 layers
    "gemma3n_text": {"num_kv_shared_layers": 0, "activation_sparsity_pattern": [0.95, 0.0], "laurel_rank": 4},
    # the sliding-window layers' multi-head latent attention sizes come from swa_* fields
    "dots3_note_text": {
        "swa_num_attention_heads": 4, "swa_num_key_value_heads": 4, "swa_q_lora_rank": 16, "swa_kv_lora_rank": 16,
        "swa_head_dim": 8, "swa_qk_nope_head_dim": 4, "swa_v_head_dim": 8, "head_dim": 8,
    },
    # rotary embeddings are sized by head_dim, which must equal the rotary part of the latent-attention head
    "longcat_flash": {"head_dim": 4, "zero_expert_num": 2, "expert_ffn_hidden_size": 32},
    # DbrxAttention reads attn_config.rope_theta, a field real checkpoints carry but the config class lacks
    "dbrx": {
        "attn_config": {"kv_n_heads": 2, "rope_theta": 10000.0, "clip_qkv": 8.0},  # clip_qkv=None crashes clamp
        "ffn_config": {"hidden_size": 32, "ffn_hidden_size": 64, "moe_num_experts": 4, "moe_top_k": 2},
    },
}


# Decoders that fail the probe because of how transformers implements them (each verified in its modelling file).
_LIMITATIONS = {
    "cpmant": "its forward takes no attention_mask or position_ids and treats token 0 as left padding",
    "xlnet": "it builds its own masks and relative positions (attn_type='bi' is bidirectional already), so packed "
             "documents cannot be isolated",
    "openai-gpt": "it builds its mask from the 2-D padding mask itself, so packed documents cannot be isolated",
    "trocr": "its decoder ignores position_ids (positions always count from the row start)",
    "deepseek_v4": "its KV compressor pools fixed windows from the row start, across padding and documents, "
                   "behind a hard-coded causal bias",
}


def _layer_overrides(present: dict, overrides: dict) -> None:
    """Shrink per-layer lists to one layer of each kind and set the layer counts to match."""
    for key in _LAYER_PATTERN_FIELDS:
        if isinstance(present.get(key), list) and present[key]:
            overrides[key] = _pattern(present[key])
            for count in ("num_hidden_layers", "num_layers", "n_layer"):
                if count in overrides:
                    overrides[count] = len(overrides[key])
    layers = next((overrides[k] for k in ("num_hidden_layers", "num_layers", "n_layer") if k in overrides), 2)
    if isinstance(present.get("mlp_layer_types"), list) and present["mlp_layer_types"]:
        kinds = list(dict.fromkeys(present["mlp_layer_types"]))  # dense first, then sparse: keep both
        overrides["mlp_layer_types"] = (kinds * layers)[:layers]


def tiny_config(model_type: str):
    """A tiny config for `model_type`, derived from its default config."""
    from transformers import AutoConfig

    default = AutoConfig.for_model(model_type)
    present = default.to_dict()
    overrides = {key: value for key, value in _TINY.items() if key in present}
    if "kv_lora_rank" in present:
        # multi-head latent attention derives its head dims from the ranks and has one key head per query head
        overrides.pop("head_dim", None)
        overrides["num_key_value_heads"] = overrides.get("num_attention_heads", 4)
    if present.get("sliding_window") is None:
        overrides.pop("sliding_window", None)  # None means "disabled": keep it so
    for token in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(present.get(token), int) and present[token] >= _TINY["vocab_size"]:
            overrides[token] = 1
    _layer_overrides(present, overrides)
    if model_type == "gpt_neo":
        overrides["attention_types"] = [[["global", "local"], 1]]  # one global and one local layer
    overrides.update(_FAMILY.get(model_type, {}))
    attempts = [{}, {"layer_types": None}, {"num_key_value_heads": overrides.get("num_attention_heads")}]
    for attempt, change in enumerate(attempts):
        # Retry with layer_types derived by the config itself, then with plain multi-head attention.
        trial = {k: v for k, v in {**overrides, **change}.items() if v is not None}
        try:
            return AutoConfig.for_model(model_type, **trial)
        except Exception:
            if attempt == len(attempts) - 1:
                raise


@contextlib.contextmanager
def _time_limit(seconds: int):
    def _raise(signum, frame):
        raise TimeoutError(f"took longer than {seconds}s")

    previous = signal.signal(signal.SIGALRM, _raise)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _reason(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return f"{type(err).__name__}: {text[:160]}".replace("|", "/")


def _cell(model_type: str, kind: str, probe) -> str:
    """The table cell for one backend's probe result."""
    if probe.passed:
        return PASS
    if kind == HYBRID and probe.passed_without_packing:
        return PADDED_ROWS
    if model_type in _LIMITATIONS:
        failed = ", ".join(name for name, value in probe.checks.items() if value is not True)
        return f"transformers limitation: {_LIMITATIONS[model_type]} (fails {failed})"
    return "; ".join(probe.failures()).replace("|", "/")


def probe_architecture(model_type: str, backends=BACKENDS, timeout: int = 30) -> ArchitectureResult:
    """Classify `model_type` and, for decoders and hybrids, build it tiny and run the probe per backend."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from hf_encoderize.bidirectional import encoderize, verify_bidirectional

    try:
        kind = classify_config(AutoConfig.for_model(model_type))
    except Exception as err:
        return ArchitectureResult(model_type, "unknown", {b: f"config: {_reason(err)}" for b in backends})
    result = ArchitectureResult(model_type, kind)
    if kind not in ENCODERIZABLE:
        return result
    for backend in backends:
        try:
            with _time_limit(timeout):
                config = tiny_config(model_type)
                with torch.device("meta"):
                    size = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
                if size > _MAX_TINY_PARAMS:
                    raise ValueError(f"the shrunk config still has {size / 1e6:.0f}M parameters; not probed")
                torch.manual_seed(0)
                model = AutoModelForCausalLM.from_config(config, attn_implementation=backend).float().eval()
                encoderize(model)
                probe = verify_bidirectional(model, raise_on_failure=False)
            result.checks[backend] = probe.checks
            result.backends[backend] = _cell(model_type, kind, probe)
        except Exception as err:
            unsupported = "does not support an attention implementation" in str(err)
            result.backends[backend] = UNSUPPORTED if unsupported else _reason(err)
    return result


def run_matrix(model_types: list[str] | None = None, backends=BACKENDS, progress=None,
               roundtrip: bool = True) -> list[ArchitectureResult]:
    """Probe every causal-LM model type (or the given ones). `progress(i, n, result)` is called after each.

    With `roundtrip`, every type that passes the probe is then saved (`save_encoder`, as `convert` does) and loaded
    back by fresh processes with plain transformers under sdpa, eager and flex_attention (`roundtrip.round_trip`); a
    type passes only when that passes too."""
    import tempfile
    import warnings

    from transformers.utils import logging

    logging.set_verbosity_error()
    model_types = model_types or causal_lm_model_types()
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for index, model_type in enumerate(model_types):
            results.append(probe_architecture(model_type, backends))
            if progress:
                progress(index + 1, len(model_types), results[-1])
        if roundtrip:
            with tempfile.TemporaryDirectory(prefix="roundtrip-") as root:
                _add_round_trip(results, root)
    return results


def _add_round_trip(results: list[ArchitectureResult], root: str) -> None:
    from hf_encoderize.roundtrip import round_trip, summary

    candidates = [r for r in results if r.probe_passed]
    reports = round_trip([r.model_type for r in candidates], root)
    for result in candidates:
        report = reports[result.model_type]
        if result.kind == HYBRID:
            # A 4-D mask cannot stop state-space layers carrying state from one packed document into the next, so
            # plain transformers cannot pack a hybrid; training uses padded rows where the probe finds a leak.
            for where in report.values():
                if isinstance(where, dict) and where.get("packing") not in (None, True):
                    where["packing"] = "n/a: hybrid (state-space layers ignore a packed mask in plain transformers)"
        result.roundtrip_report = report
        result.roundtrip = summary(report)
    for result in results:
        if result.kind in ENCODERIZABLE and result.roundtrip is None:
            result.roundtrip = "not run: the probe fails"


def passing_count(results: list[ArchitectureResult]) -> int:
    return sum(r.passed for r in results)


def render_markdown(results: list[ArchitectureResult], backends=BACKENDS) -> str:
    """The table written to docs/architectures.md and printed by `hf-encoderize architectures`."""
    import transformers

    attention = [r for r in results if r.kind in ENCODERIZABLE]
    lines = [
        "# Architecture matrix",
        "",
        f"Generated by `hf-encoderize architectures --write docs/architectures.md` with transformers "
        f"{transformers.__version__}. Every model type that transformers maps to `AutoModelForCausalLM` is "
        "classified; each decoder-only and hybrid one is built tiny (2 layers, hidden 32, sliding windows of 4), "
        "encoderized and probed (later token changes position 0, every attention layer, left/right padding, "
        "packed documents isolated).",
        "",
        f"Passing: {passing_count(results)} of {len(attention)} decoder-only/hybrid model types "
        f"({len(results)} causal-LM model types in all). A model type passes when every backend transformers offers "
        "for it passes the probe and the round trip passes; "
        f"{sum(r.probe_passed for r in results)} pass the probe, "
        f"{sum(all(v.startswith(PASS) for v in r.backends.values()) and bool(r.backends) for r in results)} of them "
        "under both sdpa and eager. A hybrid whose state-space layers carry state across packed documents (its only "
        "failing check) passes on padded rows, one document per row, which training then uses automatically.",
        "",
        "Per backend: " + "; ".join(f"{b}: " + (f"{n_probe} pass the probe, " if b in backends else
                                                "not probed in process, ") + f"{n_trip} the round trip"
                                     for b, (n_probe, n_trip) in backend_counts(results, (*backends,
                                                                                           "flex_attention")).items())
        + " (a round trip under a backend passes when it loads and every check there passes).",
        "",
        "Round trip: the encoder is saved as `convert` saves it, then a fresh process in which `hf_encoderize` cannot "
        "be imported loads it with plain transformers under sdpa, eager and flex_attention (each where transformers "
        "offers it) and checks that a later token moves position 0 (with no mask and with an all-ones mask), that "
        "left and right padding leave the real tokens unchanged, and that two documents packed with a block-diagonal "
        "4-D mask and restarted positions match each alone; then fill-mask through the shipped remote code and "
        "`SentenceTransformer` (mean pooling). Where a class stays causal under a backend in plain transformers "
        "(its code drops the `is_causal` the config sets), the saved config selects a backend that is bidirectional "
        "and declares the other causal; the cell says so. Flash attention is not in the table (no GPU here): it "
        "reads `is_causal` the way sdpa does with the mask skipped, so the sdpa column's no-mask check stands for "
        "it; `tests/test_gpu.py` runs it on a GPU.",
        "",
        "| model type | kind | " + " | ".join(backends) + " | round trip |",
        "|---|---|" + "---|" * (len(backends) + 1),
    ]
    for r in results:
        cells = [r.backends.get(b, "n/a (not an attention decoder)") for b in backends]
        cells.append(r.roundtrip or "n/a (not an attention decoder)")
        lines.append(f"| {r.model_type} | {r.kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def backend_counts(results: list[ArchitectureResult], backends) -> dict[str, tuple[int, int]]:
    """backend -> (types passing the in-process probe under it, types whose round trip passes under it)."""
    from hf_encoderize.roundtrip import failures

    counts = {}
    for backend in backends:
        probe = sum(r.backends.get(backend, "").startswith(PASS) for r in results)
        trip = 0
        for r in results:
            where = r.roundtrip_report.get(backend)
            if isinstance(where, dict) and where.get("loaded") is True:
                trip += not [p for p in failures({backend: where}) if p.startswith(backend)]
        counts[backend] = (probe, trip)
    return counts


def parse_committed_count(markdown: str) -> int:
    """Read the pass count back from a rendered table."""
    for line in markdown.splitlines():
        if line.startswith(("Passing:", "Passing both backends:")):
            return int(line.split(":")[1].split()[0])
    raise ValueError("no 'Passing:' line in the architecture table")


@dataclass
class ArchitecturesConfig:
    """Which model types `hf-encoderize architectures` probes, and how it reports them."""

    _: KW_ONLY
    model_types: list[str] | None = None
    """Probe only these model types (all that transformers maps to AutoModelForCausalLM when not given)."""
    write: str | None = None
    """Also write the markdown table to this file."""
    json: bool = False
    """Print the results as JSON instead of the markdown table."""
    roundtrip: bool = True
    """Also save every passing type and load it back in fresh processes with plain transformers (the round-trip
    column; a few minutes for all of them)."""


def architectures(config: ArchitecturesConfig) -> str:
    """`hf-encoderize architectures`: probe (one progress line per model type on stderr), write the markdown table to
    `config.write` when given, and return what to print: the table, or with `config.json` the results as JSON."""

    def progress(index, total, result):
        print(f"[{index}/{total}] {result.model_type}: {result.kind}", file=sys.stderr, flush=True)

    results = run_matrix(config.model_types, progress=progress, roundtrip=config.roundtrip)
    table = render_markdown(results)
    if config.write:
        Path(config.write).write_text(table)
    return json.dumps([asdict(r) for r in results], indent=1) + "\n" if config.json else table
