"""`hf-encoderize doctor`: what this machine has and what hf-encoderize would do on it, on one screen (as `accelerate
env` and `transformers env` do), and with a model id or folder, whether it converts here.

Design choices:
- Nothing is imported to be reported: versions come from the installed distributions' metadata, so a broken optional
  package (a flash-attn built for another torch) is still listed, and the check stays quick.
- The supported ranges are read from hf-encoderize's own installed requirements, not restated here: pyproject.toml is
  their one home.
- The `auto` picks are those of the functions training calls (`attention_backends.backend_candidates`,
  `kernel_unavailable`), so doctor cannot disagree with a run. The loss kernel that `auto` finally takes is timed at
  run start; doctor lists the candidates it would time.
- Known-bad combinations are a table of version specifiers and the one line to show (`KNOWN_BAD`), for what no
  command checks; what a command does check before any work (`CODE_CHECKS`) is asked of that check itself, so the
  verdict is the command's (a hand-written row said "contrastive --lora-r is refused" where the check let it run).
- A model is judged by its architecture: its config is read (nothing else is downloaded), classified, and a tiny
  model of its type is encoderized and probed under sdpa and eager (`architectures.probe_architecture`).
"""

from __future__ import annotations

import json
import platform
import re
from dataclasses import KW_ONLY, dataclass
from importlib import metadata

from hf_encoderize.common.errors import EncoderizeError

CORE = ("torch", "transformers", "accelerate", "peft", "sentence-transformers", "huggingface_hub", "datasets",
        "safetensors", "tokenizers")
OPTIONAL = {"bitsandbytes": "extra qlora", "deepspeed": "extra deepspeed", "flash-attn": "pip install flash-attn",
            "liger-kernel": "extra kernels", "cut-cross-entropy": "extra kernels", "mteb": "extra mteb",
            "gradio": "extra space"}
# (specifiers every one of which the installed versions meet, the one line doctor shows). Name the issue or test.
KNOWN_BAD: list[tuple[dict[str, str], str]] = [
    ({"torch": ">=2.13,<2.14"}, "torch 2.13's CPU flex-attention template fails to compile on a dynamic-shape "
                                "recompile; flex on CPU runs with static shapes (roundtrip_check sets them)"),
]

# what a command checks before any work -> that check (it raises EncoderizeError with the one line a user would see)
CODE_CHECKS = {"contrastive --lora-r": "hf_encoderize.recipes.contrastive.model:check_peft_integration"}


@dataclass
class DoctorConfig:
    """What `hf-encoderize doctor` checks."""

    _: KW_ONLY
    model: str | None = None
    """A Hub id or local folder: also say whether it converts here (reads its config only; probes a tiny copy)."""
    json: bool = False
    """Print the report as JSON instead of the one-screen text."""


def installed(name: str) -> str | None:
    """The installed version of distribution `name`, None when it is not installed.

    >>> installed("no-such-distribution-here") is None
    True
    """
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def supported_ranges() -> dict[str, str]:
    """Distribution -> the specifier hf-encoderize's own requirements give it (extras left out)."""
    from packaging.requirements import Requirement

    ranges = {}
    for line in metadata.requires("hf-encoderize") or []:
        requirement = Requirement(line)
        if requirement.marker is None:
            ranges[_normal(requirement.name)] = str(requirement.specifier)
    return ranges


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _meets(version: str | None, specifier: str) -> bool:
    from packaging.specifiers import SpecifierSet

    return version is not None and SpecifierSet(specifier).contains(version, prereleases=True)


def versions() -> dict[str, dict]:
    """Each core dependency: installed version, supported range, and whether the one is in the other."""
    ranges = supported_ranges()
    report = {}
    for name in CORE:
        version, wanted = installed(name), ranges.get(_normal(name), "")
        report[name] = {"version": version, "supported": wanted or "any", "ok": _meets(version, wanted)}
    return report


def known_bad(found: dict[str, str | None]) -> list[str]:
    """The lines of `KNOWN_BAD` whose every specifier the installed versions (`found`) meet.

    >>> [line[:30] for line in known_bad({"torch": "2.13.0+cpu", "transformers": "5.24.0", "peft": "0.21.2"})]
    ["torch 2.13's CPU flex-attentio"]
    >>> known_bad({"torch": "2.14.1", "transformers": "5.23.0", "peft": "0.21.2"})
    []
    """
    return [line for specifiers, line in KNOWN_BAD
            if all(_meets(found.get(name), spec) for name, spec in specifiers.items())]


def refused_here() -> list[str]:
    """What the commands' own checks (`CODE_CHECKS`) refuse on this machine, each in the line the command says. A
    check that cannot even run (a broken package) says so instead."""
    import importlib

    lines = []
    for what, target in CODE_CHECKS.items():
        module, name = target.split(":")
        try:
            getattr(importlib.import_module(module), name)()
        except EncoderizeError as err:
            lines.append(f"{what} is refused here: {err}")
        except Exception as err:  # noqa: BLE001 (doctor reports a broken package, it does not die of it)
            lines.append(f"{what}: its check could not run ({type(err).__name__}: {err})")
    return lines


def hardware() -> dict:
    """GPU, ROCm, and what the attention and loss paths need of it."""
    import torch

    gpu = torch.cuda.is_available()
    flex = _imports("torch.nn.attention.flex_attention")
    return {"python": platform.python_version(), "platform": platform.platform(terse=True),
            "gpu": torch.cuda.get_device_name(0) if gpu else None, "gpus": torch.cuda.device_count() if gpu else 0,
            "rocm": torch.version.hip, "cuda": torch.version.cuda,
            "bf16": bool(gpu and torch.cuda.is_bf16_supported()),
            "flex_attention": flex and (gpu or "CPU forward only"), "flash_attn": installed("flash-attn") is not None}


def _imports(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
    except Exception:  # noqa: BLE001 - a broken build counts as absent
        return False
    return True


def auto_picks() -> dict:
    """What `--attn-implementation auto` and `--loss-implementation auto` would consider on this machine."""
    import torch

    from hf_encoderize.model.attention_backends import backend_candidates, machine_skips
    from hf_encoderize.objectives.loss_kernels import KERNELS, REFERENCE, kernel_unavailable

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" and torch.cuda.is_bf16_supported() else None
    kernels = {name: kernel_unavailable(name, device, auto=True) for name in KERNELS}
    timed = [name for name, why in kernels.items() if why is None]
    return {"attention": backend_candidates(dtype), "attention_skipped": machine_skips(dtype),
            "loss": f"times {', '.join([REFERENCE, *timed])}, takes the fastest that agrees" if timed else REFERENCE,
            "loss_skipped": {name: why for name, why in kernels.items() if why}}


def model_verdict(source: str) -> dict:
    """Whether `source` converts here: its kind, and the tiny-copy probe of its model type under sdpa and eager."""
    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.matrix.architectures import probe_architecture
    from hf_encoderize.model.attention_backends import choose_backend
    from hf_encoderize.model.kinds import ENCODERIZABLE, classify_config, refusal_message
    from hf_encoderize.model.loading import LoadConfig, load_config

    try:
        config = load_config(LoadConfig(source))
    except EncoderizeError as err:
        return {"source": source, "converts": False, "why": str(err)}
    kind = classify_config(config)
    if kind not in ENCODERIZABLE:
        return {"source": source, "model_type": config.model_type, "converts": False,
                "why": refusal_message(kind, config.model_type)}
    result = probe_architecture(config.model_type)
    converts = result.probe_passed
    return {"source": source, "model_type": config.model_type, "kind": kind, "converts": converts,
            "auto_backend": choose_backend(config, "auto"), "probe": result.backends}


def doctor_report(model: str | None = None) -> dict:
    """Everything `doctor` shows, as one dict (what `--json` prints)."""
    core = versions()
    optional = {name: installed(name) for name in OPTIONAL}
    found = {name: entry["version"] for name, entry in core.items()} | optional
    report = {"hf-encoderize": installed("hf-encoderize"), "versions": core, "optional": optional,
              "hardware": hardware(), "auto": auto_picks(), "known_bad": known_bad(found) + refused_here()}
    if model:
        report["model"] = model_verdict(model)
    return report


def render(report: dict) -> str:
    """The one-screen text of a `doctor_report`."""
    hw, auto = report["hardware"], report["auto"]
    lines = [f"hf-encoderize {report['hf-encoderize']} on Python {hw['python']} ({hw['platform']})", "", "versions:"]
    for name, entry in report["versions"].items():
        mark = "ok" if entry["ok"] else f"OUTSIDE the supported {entry['supported']}"
        lines.append(f"  {name:<22} {entry['version'] or 'missing':<14} {mark}")
    present = [f"{name} {version}" for name, version in report["optional"].items() if version]
    absent = [f"{name} ({OPTIONAL[name]})" for name, version in report["optional"].items() if not version]
    lines += [f"optional: {', '.join(present) or 'none'}", f"  not installed: {', '.join(absent) or 'none'}", ""]
    gpu = (f"{hw['gpu']} x{hw['gpus']} ({'ROCm ' + hw['rocm'] if hw['rocm'] else 'CUDA ' + str(hw['cuda'])})"
        if hw["gpu"] else "none (CPU)")
    lines += [f"gpu: {gpu}; bf16 {_yes(hw['bf16'])}; flex attention {_yes(hw['flex_attention'])}; "
              f"flash-attn {_yes(hw['flash_attn'])}",
              f"auto attention: {' > '.join(auto['attention'])} (first the model's class supports)"]
    lines += [f"  skipped {name}: {why}" for name, why in auto["attention_skipped"].items()]
    lines.append(f"auto loss: {auto['loss']}")
    lines += [f"known bad: {line}" for line in report["known_bad"]] or ["known bad: none of the listed combinations"]
    if "model" in report:
        lines += ["", _model_line(report["model"])]
    return "\n".join(lines) + "\n"


def _yes(value) -> str:
    return value if isinstance(value, str) else ("yes" if value else "no")


def _model_line(verdict: dict) -> str:
    if not verdict["converts"] and "why" in verdict:
        return f"{verdict['source']}: does not convert: {verdict['why']}"
    probe = ", ".join(f"{backend} {cell}" for backend, cell in verdict["probe"].items())
    head = "converts" if verdict["converts"] else "does NOT convert"
    return (f"{verdict['source']} ({verdict['model_type']}, {verdict['kind']}): {head} here (tiny copy probed: "
            f"{probe}); auto picks {verdict['auto_backend']}")


def doctor(config: DoctorConfig) -> str:
    """`hf-encoderize doctor`: the report as one screen of text, or as JSON with `config.json`."""
    report = doctor_report(config.model)
    return json.dumps(report, indent=1) + "\n" if config.json else render(report)
