"""`export`: write a saved encoder or embedding model in a serving format, and keep only what was checked to work.

Design choices:
- ONNX through the ecosystem's own tools: `torch.onnx.export` for the fp32 graph (token states and, through the
  model's own pooling and normalisation, the embedding `encode` returns: `onnx_embedding`) and ONNX Runtime's
  weight-only 8-bit quantizer (`MatMulNBitsQuantizer`) for the int8 one (`_export_int8` says why not
  `quantize_dynamic`).
  sentence-transformers' own path (`backend="onnx"`, `export_dynamic_quantized_onnx_model`) goes through optimum-onnx,
  whose only release pins transformers < 4.58, so it cannot be installed beside the transformers 5 we need; the fp32
  file is laid out where that path reads it (`onnx/model.onnx`, input names `input_ids` and `attention_mask`, output
  `last_hidden_state`). The int8 file is named for what it is, `onnx/model_int8_weight_only.onnx` (8-bit weights,
  fp32 activations), not `model_qint8*.onnx`, sentence-transformers' name for dynamic quantization (8-bit activations
  too); it loads with `model_kwargs={"file_name": ...}`. An earlier export's `model_qint8.onnx` is removed.
- GGUF through llama.cpp's own converter (`gguf_export`): f32 and q8_0 files beside the weights, marked non-causal,
  with the model's pooling type.
- Every variant is checked where it will run, in a fresh process that cannot import hf_encoderize: `onnx_check.py`
  on ONNX Runtime, `gguf_check.py` on llama.cpp (llama-cpp-python), for (a) bidirectionality on token-level outputs
  and (b) cosine against our PyTorch embeddings (`export_reference`) on texts of several lengths (>= 0.999 fp32 and
  f32, >= 0.99 int8 and q8_0). A variant that fails is kept out of the folder and its one-line reason is recorded;
  the record (`export_record.json`, one part per format) feeds the card's "Serve it" section, and a card
  hf-encoderize wrote is regenerated with it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Literal

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.outputs import add_to_marker
from hf_encoderize.common.validation import check_choice
from hf_encoderize.model.saving import encoder_dir
from hf_encoderize.publish.card import CardConfig, is_generated_card, write_card
from hf_encoderize.publish.export_guard import check_exportable, owned_files, verdict
from hf_encoderize.publish.export_reference import check_texts, load_model, write_reference
from hf_encoderize.publish.gguf_export import VARIANTS, export_gguf
from hf_encoderize.publish.onnx_embedding import EXPORTERS, export_embedding_graph, fp32_block_matmuls
from hf_encoderize.records.export_record import EXPORT_RECORD, ExportPart, write_export_part

ExportFormat = Literal["onnx", "gguf"]
# Lowest cosine to our PyTorch embeddings a variant must reach (fp32 differs only in kernel order; int8 rounds weights).
THRESHOLDS = {"model.onnx": 0.999, "model_int8_weight_only.onnx": 0.99}
LEGACY_INT8 = ("model_qint8.onnx",)  # the int8 file's name before issue 69


@dataclass
class ExportConfig:
    """Which model to export, to what, and the texts its check runs on."""

    output_dir: str
    """A cpt/run output folder (holding encoder/), an encoder folder, or a contrastive (embedding) model folder."""
    _: KW_ONLY
    format: ExportFormat = "onnx"
    """Serving format: onnx (fp32 and int8, checked on ONNX Runtime) or gguf (f32 and q8_0 through llama.cpp's
    converter, checked on llama.cpp; needs pip install 'hf-encoderize[gguf-export]')."""
    check_texts: str | None = None
    """Text file, one text per line, for the embedding check. Default: 24 English texts of different lengths."""
    opset: int = 17
    """ONNX opset of the exported graph (17 holds the LayerNorm op ONNX Runtime fuses)."""
    llama_cpp: str | None = None
    """--format gguf: where llama.cpp's converter is, a llama.cpp checkout or a llama-cpp-python sdist (.tar.gz) of
    the installed version. Default: $HF_ENCODERIZE_LLAMA_CPP, else a cache filled from PyPI's sdist."""
    trust_remote_code: bool = False
    """Run code the folder names (`auto_map`, custom modules) other than the modeling_encoderize.py this hf-encoderize
    writes, byte for byte; without it such a folder is refused."""

    def __post_init__(self):
        check_choice("--format", self.format, ExportConfig, "format")  # the Literal's values
        if self.check_texts is not None and not Path(self.check_texts).is_file():
            raise EncoderizeError(f"--check-texts: {self.check_texts!r} is not a file; pass a text file, one per line")
        if not 11 <= self.opset <= 21:
            raise EncoderizeError(f"--opset must be between 11 and 21, not {self.opset}")
        if self.llama_cpp is not None and not Path(self.llama_cpp).exists():
            raise EncoderizeError(f"--llama-cpp: {self.llama_cpp!r} does not exist; pass a llama.cpp checkout or a "
                                  "llama-cpp-python sdist (.tar.gz)")


def export(config: ExportConfig) -> dict:
    """Export the model, check each variant out of process, keep those that pass; regenerate our card with the result.
    ONNX: onnx/model.onnx (fp32) and onnx/model_int8_weight_only.onnx; GGUF: model-f32.gguf and model-q8_0.gguf."""
    # Absolute: the checks run in subprocesses whose working folder is the staging folder.
    model_dir = encoder_dir(config.output_dir).resolve()
    texts = check_texts(config.check_texts)
    files = list(VARIANTS) if config.format == "gguf" else list(THRESHOLDS)
    trust = check_exportable(model_dir, config.format, files, trust_remote_code=config.trust_remote_code)
    if config.format == "gguf":
        variants = export_gguf(model_dir, texts, config.llama_cpp, trust_remote_code=trust)
    else:
        variants = _export_onnx(model_dir, texts, config.opset, trust)
    # What export wrote is ours: a later --overwrite of the folder accepts it (our marker lists it).
    add_to_marker(model_dir, [EXPORT_RECORD, *(["onnx"] if config.format == "onnx" else list(VARIANTS))])
    card = model_dir / "README.md"
    if card.is_file() and is_generated_card(card):  # a hand-written card is the user's: left as it is
        write_card(CardConfig(str(model_dir)))
    return {"model": str(model_dir), **{name: v["verdict"] for name, v in variants.items()},
            "lowest_cosine": {name: v.get("min_cosine") for name, v in variants.items()}}


def render_export(result: dict) -> str:
    """What `export` prints: each file's verdict, and for a verified one the number behind it (the lowest cosine of
    its embeddings to PyTorch's over the check texts)."""
    lowest = result.get("lowest_cosine") or {}
    lines = []
    for name, value in result.items():
        cosine = lowest.get(name) if value == "verified" else None
        if name != "lowest_cosine":
            lines.append(f"{name}: {value}" + (f" (lowest cosine to PyTorch {cosine:.5f})" if cosine is not None
                                              else ""))
    return "\n".join(lines) + "\n"


def _export_onnx(model_dir: Path, texts: list[str], opset: int, trust_remote_code: bool = False) -> dict:
    """fp32 and int8 graphs, each checked on ONNX Runtime; those that pass go to onnx/. Returns the variants' record."""
    try:
        import onnx  # noqa: F401  (imported here so a missing extra fails before any work)
        import onnxruntime.quantization  # noqa: F401
    except ImportError:
        raise EncoderizeError("export needs ONNX Runtime: pip install 'hf-encoderize[onnx]'") from None
    st, pooling = load_model(model_dir, trust_remote_code)
    owned = owned_files(model_dir, "onnx")  # what an earlier export kept: the only files a failed check removes
    staging = Path(tempfile.mkdtemp(prefix=".onnx-export-", dir=model_dir))
    try:
        reference = write_reference(st, pooling, texts, staging / "reference.json")
        graph, fp32 = _export_fp32(model_dir, st, staging / "model.onnx", reference, opset)
        _export_int8(staging / "model.onnx", staging / "model_int8_weight_only.onnx")
        variants = {"model.onnx": fp32, **{name: _check(model_dir, staging / name, reference, threshold)
                                           for name, threshold in THRESHOLDS.items() if name != "model.onnx"}}
        _keep_passing(model_dir, staging, variants, owned)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    write_export_part(model_dir, "onnx", ExportPart(pooling=pooling, texts=len(texts), **graph, variants=variants))
    return variants


def _export_fp32(model_dir: Path, st, path: Path, reference: Path, opset: int) -> tuple[dict, dict]:
    """The fp32 graph (token states and the embedding) from the first of `EXPORTERS` whose graph verifies on ONNX
    Runtime: dynamo, else the TorchScript tracer, recorded as a fallback with the reason. Returns (graph facts, fp32
    check)."""
    threshold, why = THRESHOLDS["model.onnx"], None
    for exporter in EXPORTERS:
        try:
            graph = export_embedding_graph(st, path, opset, exporter)
        except EncoderizeError:
            raise
        except Exception as err:  # torch.export cannot take this model: the next exporter may
            if exporter == EXPORTERS[-1]:
                raise
            why = f"{exporter}: {type(err).__name__}: {' '.join(str(err).split())[:160]}"
            continue
        fp32 = _check(model_dir, path, reference, threshold)
        if fp32["verdict"] == "verified" or exporter == EXPORTERS[-1]:
            return {**graph, **({"exporter_fallback": why} if why else {})}, fp32
        why = f"{exporter}: {fp32['verdict']}"
    raise AssertionError("unreachable: the last exporter returns or raises")


def _export_int8(source: Path, path: Path) -> None:
    """Weight-only int8 (ONNX Runtime's MatMulNBits, blocks of 32). Dynamic quantization (`quantize_dynamic`) also
    rounds activations to 8 bits, and a decoder's massive activations wreck that: on the SmolLM2-135M encoder it gave
    cosine 0.24 to PyTorch (0.30-0.43 per channel); weight-only 8-bit gave >= 0.9928. The first blocks stay fp32
    (`fp32_block_matmuls` says why and what it measured)."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    model = onnx.load(str(source))
    quantizer = MatMulNBitsQuantizer(model, nodes_to_exclude=fp32_block_matmuls(model),  # the first blocks stay fp32
                                     algo_config=DefaultWeightOnlyQuantConfig(block_size=32, is_symmetric=True, bits=8))
    quantizer.process()
    quantizer.model.save_model_to_file(str(path), use_external_data_format=False)


def _check(model_dir: Path, model_file: Path, reference: Path, threshold: float) -> dict:
    """Run onnx_check.py in a fresh process; the verdict is 'verified' or one line saying why not."""
    script = Path(__file__).with_name("onnx_check.py")
    done = subprocess.run([sys.executable, str(script), str(model_dir), str(model_file), str(reference)],
                          capture_output=True, text=True, timeout=900, cwd=model_file.parent)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"verdict": f"not kept: ONNX Runtime could not run it ({last})", "threshold": threshold}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["threshold"] = threshold
    if not result["bidirectional"]:
        result["verdict"] = "not kept: ONNX Runtime runs it causally (a later token does not move position 0)"
    else:
        result["verdict"] = verdict(result, threshold, "ONNX Runtime")  # a NaN cosine fails
    return result


def _keep_passing(model_dir: Path, staging: Path, variants: dict, owned: set[str]) -> None:
    """Move verified variants into onnx/; remove a stale file of a failed variant (it no longer matches the model)
    when our earlier export wrote it (`owned`): a file of the user's is never removed."""
    onnx_dir = model_dir / "onnx"
    for name, result in variants.items():
        target = onnx_dir / name
        if result["verdict"] == "verified":
            onnx_dir.mkdir(exist_ok=True)
            shutil.move(str(staging / name), str(target))
        elif target.is_file() and f"onnx/{name}" in owned:
            target.unlink()
    for name in LEGACY_INT8:  # what our earlier exports called the int8 file: it no longer matches the model
        if f"onnx/{name}" in owned and (onnx_dir / name).is_file():
            (onnx_dir / name).unlink()
