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

from hf_encoderize.loading import ENCODERIZABLE, classify_config

BACKENDS = ("sdpa", "eager")
PASS = "pass"
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
}  # fmt: skip
_MAX_TINY_PARAMS = 20_000_000


@dataclass
class ArchitectureResult:
    model_type: str
    kind: str
    backends: dict = field(default_factory=dict)
    """backend -> "pass" or the exact reason it failed."""

    @property
    def passed(self) -> bool:
        """Passes every backend transformers offers for it (at least one)."""
        offered = [v for v in self.backends.values() if v != UNSUPPORTED]
        return bool(offered) and all(v == PASS for v in offered)


def causal_lm_model_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def _pattern(layer_types: list) -> list:
    """Keep one layer of each kind (first occurrence order), at least two layers."""
    kinds = list(dict.fromkeys(layer_types))
    return kinds if len(kinds) >= 2 else kinds * 2


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
    if isinstance(present.get("layer_types"), list) and present["layer_types"]:
        overrides["layer_types"] = _pattern(present["layer_types"])
        for key in ("num_hidden_layers", "num_layers", "n_layer"):
            if key in overrides:
                overrides[key] = len(overrides["layer_types"])
    if model_type == "gpt_neo":
        overrides["attention_types"] = [[["global", "local"], 1]]  # one global and one local layer
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
            result.backends[backend] = PASS if probe.passed else "; ".join(probe.failures()).replace("|", "/")
        except Exception as err:
            unsupported = "does not support an attention implementation" in str(err)
            result.backends[backend] = UNSUPPORTED if unsupported else _reason(err)
    return result


def run_matrix(model_types: list[str] | None = None, backends=BACKENDS, progress=None) -> list[ArchitectureResult]:
    """Probe every causal-LM model type (or the given ones). `progress(i, n, result)` is called after each."""
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
    return results


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
        f"Passing both backends: {passing_count(results)} of {len(attention)} decoder-only/hybrid model types "
        f"({len(results)} causal-LM model types in all). A model type passes when every backend transformers offers "
        "for it passes; "
        f"{sum(all(v == PASS for v in r.backends.values()) and bool(r.backends) for r in results)} pass under "
        "both sdpa and eager.",
        "",
        "| model type | kind | " + " | ".join(backends) + " |",
        "|---|---|" + "---|" * len(backends),
    ]
    for r in results:
        cells = [r.backends.get(b, "n/a (not an attention decoder)") for b in backends]
        lines.append(f"| {r.model_type} | {r.kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def parse_committed_count(markdown: str) -> int:
    """Read the pass count back from a rendered table."""
    for line in markdown.splitlines():
        if line.startswith("Passing both backends:"):
            return int(line.split(":")[1].split()[0])
    raise ValueError("no 'Passing both backends:' line in the architecture table")


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


def architectures(config: ArchitecturesConfig) -> str:
    """`hf-encoderize architectures`: probe (one progress line per model type on stderr), write the markdown table to
    `config.write` when given, and return what to print: the table, or with `config.json` the results as JSON."""

    def progress(index, total, result):
        print(f"[{index}/{total}] {result.model_type}: {result.kind}", file=sys.stderr, flush=True)

    results = run_matrix(config.model_types, progress=progress)
    table = render_markdown(results)
    if config.write:
        Path(config.write).write_text(table)
    return json.dumps([asdict(r) for r in results], indent=1) + "\n" if config.json else table
