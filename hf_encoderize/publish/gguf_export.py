"""`export --format gguf`: llama.cpp's own converter, f32 and q8_0 files, each checked on llama.cpp before it is kept.

Design choices:
- The converter is llama.cpp's `convert_hf_to_gguf.py` (with its `conversion/` package and its own `gguf-py`), of the
  llama.cpp that the installed llama-cpp-python was built from: that package's sdist vendors it. It comes from
  `--llama-cpp` (a llama.cpp checkout, or that sdist), else $HF_ENCODERIZE_LLAMA_CPP, else a cache folder
  (`converter_cache`) filled from the sdist on PyPI with `pip download` (scripts/setup.sh fills it from the sdist it
  builds). Offline with nothing cached is one error line naming the command to run.
- It runs in a subprocess (`gguf_convert.py`) beside its own gguf-py, never the PyPI `gguf` this package loads GGUF
  files with. config.json's `is_causal: false` becomes `<arch>.attention.causal = false`; the sentence-transformers
  Pooling module becomes the GGUF pooling type (the wrapper makes every architecture's class write it).
- A model type the converter has no class for is refused in one line before anything is written: its architecture
  is looked up in the converter's own registrations (its `@ModelBase.register` decorators, read as text).
- f32, not f16: on the SmolLM2-135M encoder, with an f32 KV cache, f32 matches PyTorch (lowest cosine 1.00000 on the
  serving benchmark's texts) where f16 reads 0.9986 on a short one (>= 0.999 needed). q8_0 (>= 0.99 needed) is a
  quarter of f32, but llama.cpp also rounds the activations to 8 bits in its matmuls; on that encoder it reads 0.964
  and is kept out. The check and the card's commands use an f32 KV cache (see gguf_check.py).
  Each is checked by `gguf_check.py` in a fresh process on llama-cpp-python; a file that fails is not left in the
  folder (a stale one from an earlier export is removed), and its one-line reason is recorded.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zlib
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.publish.export_guard import owned_files, verdict
from hf_encoderize.publish.export_reference import load_model, write_reference
from hf_encoderize.records.export_record import ExportPart, write_export_part

LLAMA_CPP_ENV = "HF_ENCODERIZE_LLAMA_CPP"
# File -> (the converter's --outtype, lowest cosine to our PyTorch embeddings it must reach).
VARIANTS = {"model-f32.gguf": ("f32", 0.999), "model-q8_0.gguf": ("q8_0", 0.99)}
# What the converter needs of llama.cpp's tree (the rest of the 76 MB sdist is C++ that the wheel already built).
CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/", "LICENSE")
EXTRA = "pip install 'hf-encoderize[gguf-export]'"
# The llama-cpp-python releases the export is checked with (the gguf-export extra declares the same range; a test
# holds them equal): from the one scripts/setup.sh builds and the tests run, below the next minor release, whose
# converter may change what it writes. A range, not a pin, so the extra installs beside a user's own llama-cpp-python.
LLAMA_CPP_RANGE = ("0.3.36", "0.4")
COMPLETE = ".complete"  # written last into an unpacked converter cache: without it the cache is half-filled


def export_gguf(model_dir: Path, texts: list[str], llama_cpp: str | None, *, trust_remote_code: bool = False) -> dict:
    """Convert to every VARIANTS file, check each on llama.cpp, keep those that pass. Returns the variants' record."""
    model_dir = Path(model_dir).resolve()  # the converter and the checks run in the staging folder
    version = llama_cpp_version()
    converter = find_converter(llama_cpp or os.environ.get(LLAMA_CPP_ENV), version)
    refuse_unsupported(model_dir, converter, version)
    st, pooling = load_model(model_dir, trust_remote_code)
    owned = owned_files(model_dir, "gguf")  # what an earlier export kept: the only files a failed check removes
    staging = Path(tempfile.mkdtemp(prefix=".gguf-export-", dir=model_dir))
    try:
        reference = write_reference(st, pooling, texts, staging / "reference.json")
        del st
        written = json.loads(reference.read_text())  # a client pooling its own states needs these (the card's snippet)
        client = {key: written[key] for key in ("prompt", "prompt_length", "normalize")} if written["prompt"] else {}
        _convert(converter, model_dir, staging)
        variants = {name: _check(staging / name, reference, threshold) for name, (_, threshold) in VARIANTS.items()}
        _keep_passing(model_dir, staging, variants, owned)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    write_export_part(model_dir, "gguf", ExportPart(pooling=pooling, texts=len(texts), llama_cpp_python=version,
                                                    **client, variants=variants))
    return variants


def llama_cpp_version() -> str:
    """The installed llama-cpp-python's version, refused in one line outside `LLAMA_CPP_RANGE`."""
    try:
        version = importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        raise EncoderizeError(f"--format gguf checks each file on llama.cpp through llama-cpp-python: {EXTRA} "
                              "(it compiles llama.cpp; bash scripts/setup.sh shows how in minutes)") from None
    if not in_range(version):
        low, high = LLAMA_CPP_RANGE
        raise EncoderizeError(f"--format gguf was tested with llama-cpp-python {low} up to (not including) {high}, "
                              f"and {version} is installed: its llama.cpp converter may write keys our checks do not "
                              f"know; pip install 'llama-cpp-python>={low},<{high}'")
    return version


def _release(version: str) -> tuple[int, ...]:
    """(0, 3, 36) of "0.3.36" (a local or pre-release tail such as "+cpu" or "rc1" ends the release numbers)."""
    return tuple(int(part) for part in re.match(r"\d+(?:\.\d+)*", version).group().split("."))


def in_range(version: str) -> bool:
    """Whether llama-cpp-python `version` lies in `LLAMA_CPP_RANGE` (what the gguf-export extra declares)."""
    low, high = LLAMA_CPP_RANGE
    return _release(low) <= _release(version) < _release(high)


def converter_cache(version: str) -> Path:
    """Where the converter of llama-cpp-python `version` is kept: $HF_ENCODERIZE_CACHE, else
    $XDG_CACHE_HOME/hf-encoderize, else ~/.cache/hf-encoderize; then llama.cpp-converter/<version>."""
    root = os.environ.get("HF_ENCODERIZE_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache",
                                                          "hf-encoderize")
    return Path(root) / "llama.cpp-converter" / version


def find_converter(source: str | None, version: str) -> Path:
    """The folder holding convert_hf_to_gguf.py: `source` (a checkout or an sdist), else the cache, else PyPI."""
    if source is not None:
        path = Path(source)
        if path.is_file() and path.name.endswith(".tar.gz"):
            if path.name != f"llama_cpp_python-{version}.tar.gz":  # another llama.cpp writes files this one may refuse
                raise EncoderizeError(f"--llama-cpp: {path.name!r} is not the sdist of the installed llama-cpp-python "
                                      f"{version} (llama_cpp_python-{version}.tar.gz)")
            return unpack_converter(path, converter_cache(version))
        for candidate in (path, path / "vendor" / "llama.cpp"):
            if (candidate / "convert_hf_to_gguf.py").is_file():
                return candidate
        raise EncoderizeError(f"{str(path)!r} holds no convert_hf_to_gguf.py; pass a llama.cpp checkout or a "
                              "llama-cpp-python sdist (.tar.gz)")
    cached = converter_cache(version)
    if is_complete(cached):
        return cached
    return unpack_converter(_download_sdist(version, cached.parent), cached)


def _download_sdist(version: str, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--retries", "1",
               "--timeout", "20", "-d", str(folder), f"llama-cpp-python=={version}"]
    done = subprocess.run(command, capture_output=True, text=True)
    found = sorted(folder.glob(f"llama_cpp_python-{version}.tar.gz"))
    if done.returncode != 0 or not found:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise EncoderizeError(
            f"llama.cpp's converter for llama-cpp-python {version} is not cached in {str(folder / version)!r} and "
            f"could not be downloaded ({why}); on a machine online run: pip download --no-deps --no-binary :all: "
            f"llama-cpp-python=={version} -d DIR, then pass --llama-cpp DIR/llama_cpp_python-{version}.tar.gz")
    return found[0]


def unpack_converter(sdist: Path, target: Path) -> Path:
    """Copy the converter's files out of a llama-cpp-python sdist into `target` (replaced whole, atomically).

    The files are unpacked into a temporary folder that gets `COMPLETE` last and is then renamed into place, so a cut
    unpack (Ctrl-C, a full disk) never looks like a cache; a `target` without `COMPLETE` (one left by an older version
    that unpacked in place) is moved aside and replaced."""
    if is_complete(target):
        return target
    staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=_mkdir(target.parent)))
    try:
        _unpack(sdist, staging)
        (staging / COMPLETE).write_text(f"{sdist.name}\n")
        staging.chmod(0o755)  # mkdtemp's 0700 would keep the shared cache from other users
        if target.exists():  # half-filled: set aside, then replaced in one rename
            aside = target.with_name(f".{target.name}.old-{os.getpid()}")
            target.rename(aside)
            shutil.rmtree(aside, ignore_errors=True)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def is_complete(cache: Path) -> bool:
    """A converter cache that can run: marked `COMPLETE`, or (unpacked before the mark existed) holding every part."""
    if (cache / COMPLETE).is_file():
        return True
    return all((cache / part).is_dir() and any((cache / part).iterdir()) if part.endswith("/")
               else (cache / part).is_file() for part in CONVERTER_PARTS) and (cache / "conversion" / "__init__.py"
                                                                             ).is_file() and not _legacy_cut(cache)


def _legacy_cut(cache: Path) -> bool:
    """An unmarked cache whose gguf-py has no package: a cut unpack from before `COMPLETE`."""
    return not (cache / "gguf-py" / "gguf" / "__init__.py").is_file()


def _unpack(sdist: Path, staging: Path) -> None:
    """The converter's files (CONVERTER_PARTS) of the sdist, into `staging`; a cut or foreign archive is one line."""
    try:
        with tarfile.open(sdist) as archive:
            for member in archive.getmembers():
                parts = Path(member.name).parts  # llama_cpp_python-X/vendor/llama.cpp/<rel>
                rel = "/".join(parts[3:])
                if (member.isfile() and parts[1:3] == ("vendor", "llama.cpp") and ".." not in parts
                        and any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in CONVERTER_PARTS)):
                    out = staging / rel
                    out.parent.mkdir(parents=True, exist_ok=True)
                    out.write_bytes(archive.extractfile(member).read())
    except (tarfile.TarError, EOFError, OSError, zlib.error) as err:
        raise EncoderizeError(f"{str(sdist)!r} cannot be unpacked ({err}): the download is cut or not a "
                              "llama-cpp-python sdist; download it again (pip download --no-deps --no-binary :all: "
                              "llama-cpp-python) and pass it with --llama-cpp") from None
    if not (staging / "convert_hf_to_gguf.py").is_file():
        raise EncoderizeError(f"{str(sdist)!r} vendors no llama.cpp converter; pass a llama-cpp-python sdist")


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def refuse_unsupported(model_dir: Path, converter: Path, version: str) -> None:
    """One line when the converter has no class for the model's architecture (config.json `architectures[0]`)."""
    config = json.loads((model_dir / "config.json").read_text())
    architecture = (config.get("architectures") or [None])[0]
    if architecture not in supported_architectures(converter):
        raise EncoderizeError(f"--format gguf: llama.cpp's converter (llama-cpp-python {version}) does not support "
                              f"model type {config.get('model_type')!r} (architecture {architecture}); export onnx "
                              "instead")


def supported_architectures(converter: Path) -> set[str]:
    """The architectures named in the converter's `@ModelBase.register(...)` decorators (in conversion/*.py since
    2026, in convert_hf_to_gguf.py before), read as text: importing the converter costs torch's import."""
    sources = [converter / "convert_hf_to_gguf.py", *sorted((converter / "conversion").glob("*.py"))]
    decorators = (re.findall(r"@ModelBase\.register\((.*?)\)", path.read_text(encoding="utf-8"), flags=re.S)
                  for path in sources if path.is_file())
    return {name for found in decorators for args in found for name in re.findall(r"[\"']([\w.-]+)[\"']", args)}


def _convert(converter: Path, model_dir: Path, staging: Path) -> None:
    script = Path(__file__).with_name("gguf_convert.py")
    outputs = [f"{outtype}={staging / name}" for name, (outtype, _) in VARIANTS.items()]
    done = subprocess.run([sys.executable, str(script), str(converter), str(model_dir), *outputs],
                          capture_output=True, text=True, timeout=3600, cwd=staging)
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()] or ["no output"]
        raise EncoderizeError(f"llama.cpp's converter failed on {str(model_dir)!r}: {lines[-1].strip()}")


def _check(model_file: Path, reference: Path, threshold: float) -> dict:
    """Run gguf_check.py in a fresh process; the verdict is 'verified' or one line saying why not."""
    script = Path(__file__).with_name("gguf_check.py")
    done = subprocess.run([sys.executable, str(script), str(model_file), str(reference)], capture_output=True,
                          text=True, timeout=900, cwd=model_file.parent)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"verdict": f"not kept: llama.cpp could not run it ({last})", "threshold": threshold}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["threshold"] = threshold
    pooling = json.loads(reference.read_text())["pooling"]
    if not result["bidirectional"]:
        result["verdict"] = "not kept: llama.cpp runs it causally (a later token does not move position 0)"
    elif result["gguf_pooling"] != pooling:
        result["verdict"] = f"not kept: the GGUF's pooling type is {result['gguf_pooling']!r}, the model's {pooling!r}"
    else:
        result["verdict"] = verdict(result, threshold, "llama.cpp")  # a NaN cosine fails
    return result


def _keep_passing(model_dir: Path, staging: Path, variants: dict, owned: set[str]) -> None:
    """Move verified files next to the weights; remove a stale file of a failed variant (it no longer matches) when
    our earlier export wrote it (`owned`): a file of the user's is never removed."""
    for name, result in variants.items():
        if result["verdict"] == "verified":
            shutil.move(str(staging / name), str(model_dir / name))
        elif (model_dir / name).is_file() and name in owned:
            (model_dir / name).unlink()
