"""`--method distill --teacher MODEL`: the model learns a sentence-transformers teacher's embedding of each text,
so any unlabelled text will do.

Design choices:
- sentence-transformers' own recipe (its distillation example; Reimers & Gurevych, 2020, "Making Monolingual Sentence
  Embeddings Multilingual using Knowledge Distillation"): the teacher embeds every training text once, before
  training, into a `label` column, and the student learns those vectors with `MSELoss` through the same trainer,
  batch sampler, schedule and checkpoints as the other methods. No teacher runs during training.
- When the widths differ, a Dense projection (student width -> teacher width, no activation) follows the pooling as a
  module of the model, not as the loss's `projection_dim` (which is not saved): `encode` gives one teacher-width
  vector, and Matryoshka sizes, export (ONNX traces Dense) and the Space see one model. It starts at the least-squares
  map from the student's embeddings to the teacher's on the first 1,024 training texts (ridge 1e-3 of the mean
  squared norm), so the steps train the encoder towards the teacher rather than a random map first.
- `--distill-variants N` adds N minimal edits of each text before the teacher labels them: one lowercase word (3+
  letters, not part of a contraction) replaced by another word of the texts, drawn with `--seed` (a resume draws the
  same). Plain sentences rarely show that one word can change the meaning; the teacher's labels of the edits do.
  Measured on benchmarks/topical_paraphrases.py (issue 53; docs/contrastive.md): with one edit per sentence, a
  distractor that differs from the query by a few words outranked the paraphrase less often.
- `--distill-synonyms N` adds N near-synonym edits of each text: a content word replaced by its nearest other word
  of the texts in the teacher's own embedding space (cosine 0.6 or more, not an inflection, stop words skipped; car
  -> vehicle, children -> kids). The one-word edits show that a word can change the meaning; these show that another
  word can keep it, which is what a paraphrase does. No thesaurus ships offline; the teacher is one.
- `--distill-contrastive-weight W` adds SimCSE's in-batch loss: each row holds its text twice, one forward embeds both
  views (dropout on, as in simcse), and the loss is MSE(each view, teacher) + W * MultipleNegativesRankingLoss(view 1,
  view 2), both sentence-transformers' own, composed through their `compute_loss_from_embeddings`.
- The teacher loads without remote code (`trust_remote_code=False`, whatever the student allows). A missing path, a
  folder that is not a sentence-transformers model (no modules.json: a plain transformers folder would load with a
  guessed mean pooling, not the teacher's own) and a model that does not load are each one error line, before the
  output folder is touched.
- The run record and the card name the teacher and its license (from the teacher's own card), beside the base's.
"""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.launch import world_size
from hf_encoderize.common.log import get_logger, progress_shown
from hf_encoderize.data.stop_words import ENGLISH_STOP_WORDS
from hf_encoderize.model.load_errors import is_remote_code_refusal, local_folder_problem
from hf_encoderize.model.teachers import resolve_teacher

log = get_logger(__name__)


def check_teacher(name: str) -> bool:
    """Refuse a teacher path that is missing or not a sentence-transformers folder, from the files alone (what `run`
    checks before cpt). Returns whether `name` is a local folder (else a Hub id). An official teacher's name or Hub id
    is its checked folder first (`model.teachers.resolve_teacher`: the Hub at a pinned revision, else the packaged
    copy, else one error line naming `hf-encoderize assets fetch`)."""
    name = resolve_teacher(name)
    path = Path(name).expanduser()
    local = path.exists() or name.startswith((".", "/", "~")) or name.count("/") > 1
    if local and not path.is_dir():
        raise EncoderizeError(f"--teacher {name!r}: no such folder; give a sentence-transformers model folder (or "
                              "a Hub id)")
    if local and not (path / "modules.json").is_file():
        raise EncoderizeError(f"--teacher {name!r} is not a sentence-transformers model (no modules.json): the "
                              "teacher's embeddings are what the model learns, so its pooling must be saved with it")
    if local and (problem := _transformer_problem(path)):
        raise EncoderizeError(f"--teacher {name!r}: {problem}")
    return local


def _transformer_problem(path: Path) -> str | None:
    """What is wrong with the files of a local teacher's transformer module (`model.load_errors`: a config that is
    not JSON, weights cut short), read without loading it, so `run` refuses a cut teacher before cpt trains."""
    import json

    try:
        modules = json.loads((path / "modules.json").read_text())
        folders = [path / module.get("path", "") for module in modules
                   if str(module.get("type", "")).endswith("Transformer")]
    except (OSError, ValueError, AttributeError, TypeError):
        return "modules.json is not a sentence-transformers module list; re-download or re-save the teacher"
    return next((problem for folder in folders if (problem := local_folder_problem(folder))), None)


def load_teacher(name: str):
    """The teacher as a SentenceTransformer, loaded without remote code; a bad one is one `EncoderizeError`."""
    from sentence_transformers import SentenceTransformer

    name = resolve_teacher(name)  # the same folder check_teacher checks (its digests are remembered)
    local, path = check_teacher(name), Path(name).expanduser()
    try:
        return SentenceTransformer(str(path) if local else name, trust_remote_code=False)
    except Exception as err:
        if is_remote_code_refusal(err):
            raise EncoderizeError(f"--teacher {name!r} needs remote code, which a teacher is never loaded with; pick "
                                  "one that loads without it") from None
        raise EncoderizeError(f"cannot load --teacher {name!r} as a sentence-transformers model: "
                              f"{type(err).__name__}: {' '.join(str(err).split())[:200]}") from None


FIT_TEXTS = 1024  # texts the projection's least-squares start is fitted on (one forward pass each, no gradient)
RIDGE = 1e-3  # the fit's ridge, relative to the mean squared norm of a student embedding: keeps it well posed


def with_projection(model, width: int, texts: list[str], labels: torch.Tensor, prompt: str):
    """`model` followed by a Dense projection to `width` (no activation) when its own width differs, started at the
    least-squares map from the student's embeddings of `texts` (with `prompt`) to the teacher's `labels`."""
    from sentence_transformers import SentenceTransformer, models

    student = model.get_embedding_dimension()
    if student == width:
        return model
    weight, bias = least_squares(model, texts[:FIT_TEXTS], labels[:FIT_TEXTS], prompt)
    dense = models.Dense(student, width, activation_function=torch.nn.Identity(), init_weight=weight,
                         init_bias=bias)
    dense.to(device=model.device, dtype=next(model[0].parameters()).dtype)  # LoRA keeps the base's saved dtype
    return SentenceTransformer(modules=[*model, dense], device=str(model.device))


def least_squares(model, texts: list[str], labels: torch.Tensor, prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight (width, student), bias (width,)) minimising |X W^T + b - labels|^2 + ridge |W|^2 over `texts`.
    A random start maps every text to noise: measured on the quickstart's encoder, 40 steps from it left recall@1 on
    benchmarks/topical_paraphrases.py at 0.031, below the MLM encoder's own embeddings."""
    model.eval()  # no dropout in the fit: the start is a function of the weights alone (and a resume rebuilds it)
    with torch.no_grad():
        x = model.encode(texts, prompt=prompt, convert_to_tensor=True, batch_size=32).double().cpu()  # (n, student)
    x = torch.cat([x, torch.ones(len(x), 1, dtype=x.dtype)], 1)  # the bias as a last input of 1
    gram = x.T @ x
    ridge = RIDGE * gram.diagonal().mean() * torch.eye(len(gram), dtype=x.dtype)
    solution = torch.linalg.solve(gram + ridge, x.T @ labels.double().cpu())  # (student + 1, width)
    model.train()
    return solution[:-1].T.float().contiguous(), solution[-1].float().contiguous()


WORD = re.compile(r"(?<![\w'])[a-z]{3,}(?![\w'])")  # a lowercase word of 3+ letters, not inside "isn't"


def word_variants(texts: list[str], per_text: int, seed: int) -> list[str]:
    """`per_text` minimal edits of each text (in order): one WORD replaced by another WORD of `texts`, both drawn
    with `seed`. A text without such a word gets none."""
    vocabulary = sorted({word for text in texts for word in WORD.findall(text)})
    if len(vocabulary) < 2:
        return []
    rng, variants = random.Random(seed), []
    for text in texts:
        spans = [match.span() for match in WORD.finditer(text)]
        for _ in range(per_text if spans else 0):
            start, end = rng.choice(spans)
            word = rng.choice(vocabulary)
            while word == text[start:end]:
                word = rng.choice(vocabulary)
            variants.append(text[:start] + word + text[end:])
    return variants


SYNONYM_COSINE = 0.6  # the least teacher cosine at which a nearest word counts as a near-synonym
NEIGHBOURS = 20  # nearest words looked at per word (the first that is not an inflection is the one taken or not)


def nearest_words(words: list[str], teacher, block: int = 1024) -> dict[str, str]:
    """Each content word of `words` (not one of scikit-learn's English stop words, `data.stop_words`) -> its nearest
    other content word in the teacher's embedding space, skipping inflections (a word sharing its first 4 letters, or
    holding it or held in it), kept when their cosine is at least SYNONYM_COSINE. Similarities are taken `block` words
    at a time."""
    content = [word for word in words if word not in ENGLISH_STOP_WORDS]
    if len(content) < 2:
        return {}
    vectors = teacher.encode(content, batch_size=256, convert_to_tensor=True, normalize_embeddings=True,
                             show_progress_bar=False).float().cpu()
    near = {}
    for start in range(0, len(content), block):
        sims = vectors[start:start + block] @ vectors.T
        sims[torch.arange(len(sims)), torch.arange(start, start + len(sims))] = -1.0  # not the word itself
        values, indices = sims.topk(min(NEIGHBOURS, len(content) - 1), dim=1)
        for offset, (row_values, row_indices) in enumerate(zip(values.tolist(), indices.tolist(), strict=True)):
            word = content[start + offset]
            for value, index in zip(row_values, row_indices, strict=True):
                other = content[index]
                if other[:4] == word[:4] or word in other or other in word:
                    continue  # an inflection (house, houses; happy, happier) says nothing new; a heuristic:
                    # city -> cities passes it
                if value >= SYNONYM_COSINE:
                    near[word] = other
                break
    return near


def synonym_variants(texts: list[str], per_text: int, seed: int, teacher) -> list[str]:
    """`per_text` near-synonym edits of each text (in order): one WORD that has a near-synonym (`nearest_words` over
    the words of `texts`) replaced by it, drawn with `seed`. A text without such a word gets none."""
    near = nearest_words(sorted({word for text in texts for word in WORD.findall(text)}), teacher)
    rng, variants = random.Random(seed), []
    for text in texts:
        spans = [match.span() for match in WORD.finditer(text) if match.group() in near]
        for _ in range(per_text if spans else 0):
            start, end = rng.choice(spans)
            variants.append(text[:start] + near[text[start:end]] + text[end:])
    return variants


def with_variants(rows, config, teacher) -> tuple:
    """`rows` (anchor, positive: one text twice) followed by `--distill-variants` one-word edits and then
    `--distill-synonyms` near-synonym edits of each text, as rows alike (`teacher` finds the near-synonyms), and the
    edits each option made (`{"variants": n, "synonyms": m}`, what the record and the card say). An option that made
    none is one warning line: the run trains on the texts alone, which is not what the option asked for."""
    import datasets

    if not (config.distill_variants or config.distill_synonyms):
        return rows, {}
    texts = rows["anchor"]
    variants = word_variants(texts, config.distill_variants, config.seed) if config.distill_variants else []
    synonyms = (synonym_variants(texts, config.distill_synonyms, config.seed, teacher) if config.distill_synonyms
                else [])
    made = {"variants": len(variants), "synonyms": len(synonyms)}
    for option, asked, edits, why in (
            ("--distill-variants", config.distill_variants, variants, "the texts have fewer than two distinct "
             "lowercase words of 3+ letters to swap"),
            ("--distill-synonyms", config.distill_synonyms, synonyms, "no word of the texts has a near-synonym "
             f"among them (teacher cosine {SYNONYM_COSINE} or more)")):
        if asked and not edits:
            print(f"warning: {option} {asked} made no edit: {why}; the texts alone are trained on (the record and "
                  "the card say 0 edits)", file=sys.stderr, flush=True)
    added = datasets.Dataset.from_dict({"anchor": variants + synonyms, "positive": variants + synonyms},
                                       features=rows.features)
    return datasets.concatenate_datasets([rows, added]), made


def label_rows(rows, labels: torch.Tensor, config):
    """(anchor, positive) rows of one text twice -> `text, label` (distillation alone) or `anchor, positive, label`
    (with the contrastive loss), `label` being the teacher's embedding of the text."""
    if not config.distill_contrastive_weight:
        rows = rows.select_columns(["anchor"]).rename_column("anchor", "text")
    return rows.add_column("label", labels.tolist())


class DistillWithContrastive(torch.nn.Module):
    """MSE to the teacher on both views plus `weight` x in-batch InfoNCE between the views, from one forward pass."""

    def __init__(self, model, weight: float, scale: float, gather: bool):
        from sentence_transformers import losses

        super().__init__()
        self.model, self.weight = model, weight
        self.mse = losses.MSELoss(model)
        self.mnrl = losses.MultipleNegativesRankingLoss(model, scale=scale, gather_across_devices=gather)

    def forward(self, sentence_features, labels):
        from sentence_transformers.base.losses.merged_forward import embed_columns

        embeddings = embed_columns(self.model, sentence_features)  # per column: (batch, width)
        teacher = [labels.detach()] * len(embeddings)
        return (self.mse.compute_loss_from_embeddings(embeddings, teacher) +
            self.weight * self.mnrl.compute_loss_from_embeddings(embeddings, labels))

    def get_config_dict(self) -> dict:
        return {"contrastive_weight": self.weight, "scale": self.mnrl.scale}


def distill_loss(model, config):
    """MSELoss to the teacher's embeddings (with the contrastive loss when weighted), at each Matryoshka size when
    asked (`MatryoshkaLoss` truncates teacher-width labels with the embeddings)."""
    from sentence_transformers import losses

    from hf_encoderize.recipes.contrastive.losses import with_matryoshka

    gather = config.cross_device_negatives and world_size() > 1
    weight = config.distill_contrastive_weight
    loss = DistillWithContrastive(model, weight, config.scale, gather) if weight else losses.MSELoss(model)
    return with_matryoshka(loss, model, config)


def prepare(model, rows, teacher, config, prompt: str):
    """The model with its projection, the labelled rows, the loss and the edits made (`with_variants`): what
    `contrastive` trains for distill. `prompt`: what the student's texts start with in training (the lead tokens), for
    the projection's fit."""
    rows, made = with_variants(rows, config, teacher)  # the texts first: the projection's fit reads the first FIT_TEXTS
    texts = rows["anchor"]
    # (rows, teacher width): computed once, as sentence-transformers' distillation example does; minutes on a large
    # text set, so its bar (with an ETA) shows where our progress does (`common.log.progress_shown`)
    log.info(f"labelling {len(texts):,} texts with the teacher")
    labels = teacher.encode(texts, batch_size=64, convert_to_tensor=True,
                            show_progress_bar=bool(config.progress) and progress_shown()).float().cpu()
    model = with_projection(model, teacher.get_embedding_dimension(), texts, labels, prompt)
    return model, label_rows(rows, labels, config), distill_loss(model, config), made


def teacher_facts(name: str) -> dict:
    """What the record and card say of the teacher: the name given, the model's own name, its license."""
    from hf_encoderize.model.licenses import card_license, hub_license

    path = Path(resolve_teacher(name)).expanduser()  # an official teacher: its card, in its checked folder
    readme = path / "README.md"
    license_id = card_license(readme)[0] if readme.is_file() else None if path.exists() else hub_license(name, None)[0]
    heading = re.search(r"^# (\S.*)$", readme.read_text(errors="replace"), re.M) if readme.is_file() else None
    title = heading.group(1).strip() if heading else (path.name if path.exists() else name)
    return {"teacher": name, "teacher_name": title, "teacher_license": license_id}


def distill_stage(config, folder: Path, made: dict | None = None) -> dict:
    """The stage record's distillation facts: the teacher (and its content, `teacher_identity`), its license, the
    edits asked for and made (`with_variants`), the projection saved in `folder`."""
    import json

    if config.method != "distill":
        return {}
    dense = sorted(folder.glob("*_Dense/config.json"))
    projection = json.loads(dense[0].read_text()) if dense else None
    weight, made = config.distill_contrastive_weight, made or {}
    return {**teacher_facts(config.teacher), "teacher_identity": config.identity_value("teacher"),
            "loss": "mse+mnrl" if weight else "mse",
            "distill_contrastive_weight": weight, "distill_variants": config.distill_variants,
            "distill_synonyms": config.distill_synonyms,
            "distill_variant_edits": made.get("variants", 0), "distill_synonym_edits": made.get("synonyms", 0),
            "projection": [projection["in_features"], projection["out_features"]] if projection else None}
