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
from dataclasses import KW_ONLY, asdict, dataclass, field
from pathlib import Path

from hf_encoderize.common.log import get_logger
from hf_encoderize.model.kinds import ENCODERIZABLE, HYBRID, classify_config
from hf_encoderize.model.tiny import tiny_config

log = get_logger(__name__)

BACKENDS = ("sdpa", "eager")
PASS = "pass"
# A hybrid whose only failing check is packed-document isolation trains on padded rows (one document per row), which
# the probe's other checks cover, so it counts as passing: cells starting with PASS pass.
PADDED_ROWS = "pass (padded rows: packed documents leak through the state-space layers)"
UNSUPPORTED = "n/a: transformers offers no such kernel for this model"

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

    from hf_encoderize.model.bidirectional import encoderize, verify_bidirectional

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
    from hf_encoderize.matrix.roundtrip import round_trip, summary

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
    from hf_encoderize.matrix.roundtrip import failures

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
        log.info(f"[{index}/{total}] {result.model_type}: {result.kind}")

    results = run_matrix(config.model_types, progress=progress, roundtrip=config.roundtrip)
    table = render_markdown(results)
    if config.write:
        Path(config.write).write_text(table)
    return json.dumps([asdict(r) for r in results], indent=1) + "\n" if config.json else table
