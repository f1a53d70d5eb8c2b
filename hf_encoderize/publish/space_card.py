"""What `push-space` writes beside the app for the Hub: README.md's front matter and requirements.txt, sized to the
models the Space loads.

Design choices:
- The size is the bytes of the weights the Space may hold at once: the encoder (Fill-mask), the embedding model and
  the base decoder (Compare), read from the safetensors files on this machine (transformers loads them in their saved
  dtype). A model that is only on the Hub (`--embedding-model-id` without a local copy, the base decoder) counts as
  large as the encoder: it is the same architecture, and the Hub cannot be asked from here.
- `suggested_hardware` comes from one table (`HARDWARE`): the free CPU while the weights leave room in its 16 GB, the
  32 GB CPU upgrade next, then a GPU whose memory holds them (the app moves its models to CUDA when there is one).
  The Hub does not assign it; it is what the Space's page and a duplicate suggest.
- `startup_duration_timeout` comes from the same row: the Hub's default (30m) for a small Space; a larger one pulls
  an image that holds its preloaded weights onto a fresh machine before the app starts, so it gets longer.
- `preload_from_hub` names every Hub repo the app downloads (the encoder and the embedding model when the Space loads
  them from the Hub, the base decoder; of a GGUF base its one file), so the Space's build puts them into its image and
  no cold start downloads them. A base pinned to a revision is left out (an entry can pin a commit only together with
  its list of files, which cannot be read from here); a model bundled in the Space repo needs none.
- requirements.txt pins what app.py imports to the versions installed here. On CPU hardware torch comes from
  PyTorch's CPU index (`--extra-index-url`, `torch==X+cpu`): PyPI's Linux wheel pulls gigabytes of CUDA libraries
  that a CPU Space never uses. On GPU hardware it is PyPI's (CUDA) wheel.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hf_encoderize.publish.shipped import shipped_dir
from hf_encoderize.publish.upload_set import EXCLUDED_DIRS

SPACE_DIR = shipped_dir("space")
PINNED = ("torch", "transformers", "sentence-transformers")  # what app.py imports besides gradio
CPU_INDEX = "https://download.pytorch.org/whl/cpu"  # PyTorch's index of CPU-only wheels (`torch==X+cpu`)
GIB = 1024**3


@dataclass(frozen=True)
class Hardware:
    """A row of `HARDWARE`: the Space hardware suggested for weights up to a size, and its startup timeout."""

    up_to_gib: float  # the weights the Space may hold at once, at most, in GiB
    flavor: str  # `suggested_hardware`: one of huggingface_hub's SpaceHardware values
    startup: str  # `startup_duration_timeout`: a duration as the Hub reads it ("30m", "1h")

    @property
    def cpu(self) -> bool:
        return self.flavor.startswith("cpu")


# Smallest first; the last row takes anything larger. Memory per flavor: huggingface.co/docs/hub/spaces-gpus.
HARDWARE = (
    Hardware(6, "cpu-basic", "30m"),  # 16 GB RAM, 2 vCPU (free): room for the weights, torch and gradio
    Hardware(16, "cpu-upgrade", "1h"),  # 32 GB RAM, 8 vCPU
    Hardware(20, "l4x1", "1h"),  # 24 GB of GPU memory
    Hardware(70, "a100-large", "2h"),  # 80 GB of GPU memory
)


def weight_bytes(folder: str | Path | None) -> int:
    """Bytes of the weights transformers loads from `folder`: its safetensors files (a sentence-transformers model's
    module subfolders included, training state not), else its pytorch .bin files. 0 for no folder."""
    if folder is None or not Path(folder).is_dir():
        return 0
    for pattern in ("*.safetensors", "*.bin"):
        files = [path for path in Path(folder).rglob(pattern)
                 if not EXCLUDED_DIRS & set(path.relative_to(folder).parts) and path.name != "training_args.bin"]
        if files:
            return sum(path.stat().st_size for path in files)
    return 0


def suggest_hardware(size: int) -> Hardware:
    """The first row of `HARDWARE` whose limit holds `size` bytes of weights (the last row beyond them all)."""
    return next((row for row in HARDWARE if size <= row.up_to_gib * GIB), HARDWARE[-1])


def preload_entries(model_ids: list[str | None], base: dict) -> list[str]:
    """`preload_from_hub`: each Hub model repo the Space loads (whole), and the base decoder unless pinned to a
    revision (a GGUF base: its one file, "repo file.gguf")."""
    entries = [name for name in model_ids if name]
    if base.get("base_model") and not base.get("base_revision"):
        gguf = base.get("base_gguf_file")
        entries.append(f"{base['base_model']} {gguf}" if gguf else base["base_model"])
    return list(dict.fromkeys(entries))


def pinned_requirements(hardware: Hardware, *, gguf: bool = False) -> str:
    """requirements.txt with the exact versions installed here (gradio comes from the README's sdk_version); torch
    from PyTorch's CPU index on CPU hardware."""
    from importlib.metadata import version

    names = PINNED + (("gguf",) if gguf else ())
    pins = {name: version(name).split("+")[0] for name in names}  # "2.13.0+cpu" -> "2.13.0"
    torch = [f"--extra-index-url {CPU_INDEX}", f"torch=={pins['torch']}+cpu"] if hardware.cpu else [
        f"torch=={pins['torch']}"]  # on CPU the CPU-only wheel: no CUDA libraries on a machine without a GPU
    lines = torch + [f"{name}=={pin}" for name, pin in pins.items() if name != "torch"]
    head = (f"# Pinned by hf-encoderize push-space to the versions it was run with, for {hardware.flavor} "
            f"({'CPU' if hardware.cpu else 'GPU'}) hardware.")
    return "\n".join([head, *lines]) + "\n"


def space_readme(*, title: str, models: list[str], hardware: Hardware, preload: list[str]) -> str:
    """space/README.md with its YAML header filled in: title, the installed gradio as sdk_version, the linked models,
    the suggested hardware, its startup timeout and the repos to preload."""
    from importlib.metadata import PackageNotFoundError, version

    import yaml

    _, header, body = (SPACE_DIR / "README.md").read_text().split("---\n", 2)
    meta = yaml.safe_load(header)
    meta["title"] = title[:60]
    try:
        meta["sdk_version"] = version("gradio")  # the version the app was run with here
    except PackageNotFoundError:
        pass  # keep the template's tested version
    meta["models"] = models
    meta["suggested_hardware"] = hardware.flavor
    meta["startup_duration_timeout"] = hardware.startup
    if preload:
        meta["preload_from_hub"] = preload
    return f"---\n{yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)}---\n{body}"
