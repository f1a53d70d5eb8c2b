"""`export`: write a saved encoder or embedding model in a serving format, and keep only what was checked to work.

Design choices:
- ONNX through the ecosystem's own tools: `torch.onnx.export` for the fp32 graph and ONNX Runtime's weight-only
  8-bit quantizer (`MatMulNBitsQuantizer`) for the int8 one (see `_export_int8` for why not `quantize_dynamic`).
  sentence-transformers' own path (`backend="onnx"`, `export_dynamic_quantized_onnx_model`) goes through optimum-onnx,
  whose only release pins transformers < 4.58, so it cannot be installed beside the transformers 5 we need; the files
  are laid out where that path reads them (`onnx/model.onnx`, `onnx/model_qint8.onnx`, input names `input_ids` and
  `attention_mask`, output `last_hidden_state`).
- Every variant is checked where it will run: `onnx_check.py` runs in a fresh process that cannot import
  hf_encoderize, on ONNX Runtime, for (a) bidirectionality on token-level outputs and (b) cosine against our PyTorch
  embeddings on texts of several lengths padded in one batch (>= 0.999 fp32, >= 0.99 int8). A variant that fails is
  kept out of `onnx/` and its one-line reason is recorded; the record (`export_record.json`) feeds the card's "Serve
  it" section, and a card hf-encoderize wrote is regenerated with it.
- GGUF is refused: llama.cpp's converter (`convert_hf_to_gguf.py`) ships only in the llama.cpp source tree, and
  `llama-cpp-python` compiles llama.cpp on install, which this project's test machines cannot do in minutes.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Literal, get_args

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.files import write_json_atomic
from hf_encoderize.model.saving import encoder_dir
from hf_encoderize.publish.card import CardConfig, is_generated_card, write_card

ExportFormat = Literal["onnx", "gguf"]
EXPORT_RECORD = "export_record.json"
# Lowest cosine to our PyTorch embeddings a variant must reach (fp32 differs only in kernel order; int8 rounds weights).
THRESHOLDS = {"model.onnx": 0.999, "model_qint8.onnx": 0.99}
# Texts of several lengths, padded in one batch by the check, so padding must not move the real tokens' outputs. 24 of
# them, short ones many: with the first 4 alone the SmolLM2-135M int8 export passed at 0.9928, while
# benchmarks/serving.py found 0.966 on other short texts; on these 24 it reads 0.9889 and is kept out, as it should be.
DEFAULT_TEXTS = ("Hi.", "A cat sits on the mat.", "Stock markets fell sharply today after the announcement.",
                 "The committee met on Tuesday to discuss the budget, the schedule and the new members who joined "
                 "this year, and agreed to meet again next month.", "Questions on banjo.", "Lime as well as papaya.",
                 "Our guide covers peas and zucchini.", "Where is the station?", "Thanks!",
                 "Read the manual before you start.", "How do I reset my password?", "Apples, pears and plums.",
                 "The river floods every spring.", "A kitten rests on a rug.", "Interest rates rose again.",
                 "Call me tomorrow morning.", "Solar panels convert sunlight into electricity.",
                 "The museum opens at nine.", "Bring an umbrella.",
                 "Photosynthesis turns light, water and carbon dioxide into sugar and oxygen in the leaves of green "
                 "plants.", "Guitar lessons for beginners.", "The recipe needs two eggs and a cup of flour.",
                 "Error 404: page not found.", "Paris is the capital of France.")
POOLING_MODES = ("mean", "cls", "lasttoken")  # the ones onnx_check.py pools as sentence-transformers does


@dataclass
class ExportConfig:
    """Which model to export, to what, and the texts its check runs on."""

    output_dir: str
    """A cpt/run output folder (holding encoder/), an encoder folder, or a contrastive (embedding) model folder."""
    _: KW_ONLY
    format: ExportFormat = "onnx"
    """Serving format: onnx (fp32 and dynamic int8, checked on ONNX Runtime). gguf is refused (see docs)."""
    check_texts: str | None = None
    """Text file, one text per line, for the embedding check. Default: four English sentences of different lengths."""
    opset: int = 17
    """ONNX opset of the exported graph (17 holds the LayerNorm op ONNX Runtime fuses)."""

    def __post_init__(self):
        if self.format not in get_args(ExportFormat):
            raise EncoderizeError(f"--format must be one of {', '.join(get_args(ExportFormat))}, not {self.format!r}")
        if self.format == "gguf":
            raise EncoderizeError("--format gguf is not available: llama.cpp's converter is not installable here "
                                  "(it ships only with the llama.cpp sources); export onnx, or run llama.cpp's "
                                  "convert_hf_to_gguf.py on the encoder folder yourself")
        if self.check_texts is not None and not Path(self.check_texts).is_file():
            raise EncoderizeError(f"--check-texts: {self.check_texts!r} is not a file; pass a text file, one per line")
        if not 11 <= self.opset <= 21:
            raise EncoderizeError(f"--opset must be between 11 and 21, not {self.opset}")


def export(config: ExportConfig) -> dict:
    """Export the model to ONNX (fp32 and int8), check each variant out of process, keep those that pass in onnx/."""
    model_dir = encoder_dir(config.output_dir)
    texts = _check_texts(config.check_texts)
    try:
        import onnx  # noqa: F401  (imported here so a missing extra fails before any work)
        import onnxruntime.quantization  # noqa: F401
    except ImportError:
        raise EncoderizeError("export needs ONNX Runtime: pip install 'hf-encoderize[onnx]'") from None
    st, pooling = _load(model_dir)
    staging = Path(tempfile.mkdtemp(prefix=".onnx-export-", dir=model_dir))
    try:
        reference = _reference(st, pooling, texts, staging / "reference.json")
        _export_fp32(st[0].auto_model, len(st.tokenizer), staging / "model.onnx", config.opset)
        _export_int8(staging / "model.onnx", staging / "model_qint8.onnx")
        variants = {name: _check(model_dir, staging / name, reference, threshold) for name, threshold in
                    THRESHOLDS.items()}
        _keep_passing(model_dir, staging, variants)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    record = {"format": "onnx", "pooling": pooling, "texts": len(texts), "variants": variants}
    write_json_atomic(model_dir / EXPORT_RECORD, record)
    card = model_dir / "README.md"
    if card.is_file() and is_generated_card(card):  # a hand-written card is the user's: left as it is
        write_card(CardConfig(str(model_dir)))
    return {"model": str(model_dir), **{name: v["verdict"] for name, v in variants.items()}}


def _check_texts(path: str | None) -> list[str]:
    if path is None:
        return list(DEFAULT_TEXTS)
    texts = [line.strip() for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines()]
    texts = [text for text in texts if text]
    if len(texts) < 2:
        raise EncoderizeError(f"--check-texts: {path!r} has {len(texts)} non-empty line(s); give at least 2 texts")
    return texts


def _load(model_dir: Path):
    """The model as sentence-transformers loads it, in fp32 (the graph is exported in fp32), and its pooling mode."""
    import torch
    from sentence_transformers import SentenceTransformer

    # trust_remote_code: our own encoders ship their modeling code (remote_code/) beside the weights.
    st = SentenceTransformer(str(model_dir), device="cpu", trust_remote_code=True,
                             model_kwargs={"dtype": torch.float32}).eval()
    pooling = getattr(st[1], "pooling_mode", None) if len(st) > 1 else None
    if pooling not in POOLING_MODES:
        raise EncoderizeError(f"pooling {pooling!r} of {str(model_dir)!r} cannot be checked after export; "
                              f"export supports {', '.join(POOLING_MODES)}")
    return st, pooling


def _reference(st, pooling: str, texts: list[str], path: Path) -> Path:
    """Our PyTorch embeddings of `texts` and a token probe, written for the out-of-process check."""
    tokenizer = st.tokenizer
    probe = tokenizer(" ".join(texts[-2:]))["input_ids"][:16]
    if len(probe) < 2:
        raise EncoderizeError("the check texts tokenize to fewer than 2 tokens; give longer --check-texts")
    # prompt="": the check feeds the graph the raw texts; a default prompt (lead tokens) is added outside the graph.
    embeddings = st.encode(texts, batch_size=len(texts), convert_to_numpy=True, prompt="")
    path.write_text(json.dumps({
        "texts": texts, "embeddings": embeddings.tolist(), "pooling": pooling, "max_length": st.max_seq_length,
        "probe_ids": probe, "probe_other_id": (probe[-1] + 1) % len(tokenizer),
    }))
    return path


def _export_fp32(model, vocab_size: int, path: Path, opset: int) -> None:
    """The token-level graph of `model` (sentence-transformers' Transformer module alone; pooling stays outside)."""
    import torch

    class Hidden(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask):
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    # Trace on a padded batch of 2 x 6 so the graph keeps the attention-mask path (a 1-row unpadded trace may drop it).
    ids = torch.tensor([[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6]]) % vocab_size
    mask = torch.tensor([[1] * 6, [1, 1, 1, 0, 0, 0]])
    axes = {0: "batch", 1: "sequence"}
    with torch.no_grad():
        torch.onnx.export(Hidden(model.eval()), (ids, mask), str(path), dynamo=False, opset_version=opset,
                          input_names=["input_ids", "attention_mask"], output_names=["last_hidden_state"],
                          dynamic_axes={"input_ids": axes, "attention_mask": axes, "last_hidden_state": axes})


def _export_int8(source: Path, path: Path) -> None:
    """Weight-only int8 (ONNX Runtime's MatMulNBits, blocks of 32). Dynamic quantization (`quantize_dynamic`) also
    rounds activations to 8 bits, and a decoder's massive activations wreck that: on the SmolLM2-135M encoder it gave
    cosine 0.24 to PyTorch (0.30-0.43 per channel); weight-only 8-bit gave >= 0.9928."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantConfig, MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(str(source)),
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
    elif result["min_cosine"] < threshold:
        result["verdict"] = f"not kept: cosine to PyTorch {result['min_cosine']:.4f} < {threshold}"
    else:
        result["verdict"] = "verified"
    return result


def _keep_passing(model_dir: Path, staging: Path, variants: dict) -> None:
    """Move verified variants into onnx/; remove a stale file of a failed variant (it no longer matches the model)."""
    onnx_dir = model_dir / "onnx"
    for name, result in variants.items():
        target = onnx_dir / name
        if result["verdict"] == "verified":
            onnx_dir.mkdir(exist_ok=True)
            shutil.move(str(staging / name), str(target))
        elif target.is_file():
            target.unlink()
