"""`hf-encoderize contrastive ENCODER`: turn an encoder made here into an embedding model with sentence-transformers.

Design choices:
- Everything that trains is sentence-transformers' own: `SentenceTransformerTrainer`, its
  `MultipleNegativesRankingLoss` (InfoNCE with in-batch negatives, LLM2Vec's loss for both stages) or the cached
  (GradCache) variant for large batches on small memory, and its no-duplicates batch sampler (a duplicate in a batch
  would be a false negative). No hand-written loss.
- `simcse` (unsupervised, Gao et al. 2021; LLM2Vec's second stage): each sentence is its own positive, the two views
  differing only by dropout, so dropout must be on. Decoder configs usually have none (Llama's `attention_dropout` is
  0.0): the model loads with `attention_dropout` (and hidden dropouts the config has) set to `--dropout`, 0.3 by
  default as in LLM2Vec's SimCSE configs, and the saved config has them back at 0 for inference.
- `supervised`: (anchor, positive[, hard negative]) rows from `--data-files` or a Hub dataset, column names as options.
- `distill` (`--teacher MODEL`): the model learns a sentence-transformers teacher's embedding of each text with
  sentence-transformers' `MSELoss` (its distillation recipe), through a saved Dense projection when the widths differ;
  any unlabelled text will do (`distill` says why each choice).
- Pooling: mean (default, the paper's pooling for IR), last token or weighted mean, as LLM2Vec offers. Optional
  instruction prefixes for queries and documents are applied in training and saved as sentence-transformers prompts
  (`encode(..., prompt_name="query")`).
- Precision: a full fine-tune loads the encoder in fp32 (master weights; bf16 autocast on a GPU that has it) and is
  saved back in the encoder's own dtype. An encoder saved in bf16 would otherwise train in pure bf16, where AdamW
  updates below about 0.4% of a weight round to nothing. LoRA keeps the base as saved (its adapters are fp32).
- Everything is validated (encoder folder, output folder, method, columns, rows) before the output folder is touched;
  the result is written under a temporary name and renamed into place, so a failure leaves nothing half-written. The
  output folder follows `common.outputs` (only a marked folder of ours is replaced, never the encoder read), and the
  work folder holds the run's lock, so a second run on the same output is refused while the first is live.
- The output loads without hf-encoderize: a sentence-transformers folder whose transformer config keeps
  `is_causal: false` (plain `AutoModel` is bidirectional), with the input folder's `modeling_encoderize.py` so
  `AutoModel.from_pretrained(out, trust_remote_code=True)` still applies the patch. The MLM head is not part of an
  embedding model, so the `AutoModelForMaskedLM` entry is dropped. `contrastive_run.json` records both stages.

The package, one job per module: `config` (ContrastiveConfig and its checks), `rows` (the training rows), `model`
(the sentence-transformers model, its prompts and adapters), `losses` (the loss, hard negatives, Matryoshka sizes),
`distill` (the teacher, its labels, the projection), `resume` (the work folder and checkpoints) and `train` (the
command).
"""

from hf_encoderize.recipes.contrastive.config import BUILDERS, LOSSES, METHODS, POOLINGS, ContrastiveConfig
from hf_encoderize.recipes.contrastive.losses import RELATIVE_MARGIN, mine_negatives
from hf_encoderize.recipes.contrastive.model import build_model, check_peft_integration
from hf_encoderize.recipes.contrastive.resume import recorded_settings, work_dir
from hf_encoderize.recipes.contrastive.rows import load_rows
from hf_encoderize.recipes.contrastive.train import contrastive

__all__ = ["BUILDERS", "LOSSES", "METHODS", "POOLINGS", "RELATIVE_MARGIN", "ContrastiveConfig", "build_model",
           "check_peft_integration", "contrastive", "load_rows", "mine_negatives", "recorded_settings", "work_dir"]
