"""Extractive QA (SQuAD, SQuAD v2, ReCoRD): start and end logits over tokens, cross-entropy on the gold span.

Design choices (those of transformers' `run_qa.py` example, which the paper's numbers are comparable to):
- question + context are encoded as a pair; a context longer than `max_length` is split into windows that overlap by
  `stride` tokens. A window that does not hold the whole answer (and an unanswerable question) points at position 0.
- An example's answer is the best-scoring span (start + end logit, at most 30 tokens, inside the context) over all
  its windows. For sets with unanswerable questions (SQuAD v2), "no answer" is predicted when the null score
  (start + end logit at position 0, lowest over windows) beats the best span: the null-score rule.
- Scored with the F1 and exact match of each set's official script, on normalised text (lowercase, no punctuation or
  articles): SQuAD v2.0's for sets with unanswerable questions, ReCoRD's for ReCoRD, SQuAD v1.1's otherwise. They
  differ only where a gold or the prediction normalises to "" (see `f1_and_em`).
"""

from __future__ import annotations

import collections
import re
import string
from typing import Literal

import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.evaluation.base import Prepared, Scores, Task, sorted_batches, to_device

MAX_ANSWER_TOKENS = 30
N_BEST = 20
MAX_QUESTION_TOKENS = 64


# --------------------------------------------------------------------------------------------------------- metrics


QaMetric = Literal["squad", "squad_v2", "record"]


def normalize_answer(text: str) -> str:
    """The SQuAD evaluation script's normalisation (identical in v1.1, v2.0 and ReCoRD's script)."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _token_f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    common = sum((collections.Counter(pred_tokens) & collections.Counter(gold_tokens)).values())
    if not common:  # also when both are empty: v1.1 and ReCoRD give F1 0 there (their EM is still 1)
        return 0.0
    precision, recall = common / len(pred_tokens), common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1_and_em(prediction: str, answers: list[str], metric: QaMetric = "squad_v2") -> tuple[float, float]:
    """Best token F1 and exact match (0 or 1) of `prediction` over the gold `answers`, as the official script of
    `metric` computes them: "squad" (SQuAD v1.1 `evaluate-v1.1.py`), "record" (ReCoRD's `evaluate.py`, whose F1 and EM
    are v1.1's unchanged) or "squad_v2" (`evaluate-v2.0.py`).

    v2.0 first drops the golds that normalise to "" (such as "the" or "!") and scores against `[""]` only when none is
    left, and gives F1 1 to an empty prediction against an empty gold. v1.1 and ReCoRD keep every gold and give F1 0
    when prediction and gold both normalise to "" (EM 1). A question with no gold at all cannot be scored by v1.1 or
    ReCoRD (their `max()` over golds fails); it counts as a miss, as their unanswered questions do."""
    pred_tokens = normalize_answer(prediction).split()
    if metric == "squad_v2":
        golds = [tokens for tokens in (normalize_answer(gold).split() for gold in answers) if tokens] or [[]]
        em = max(float(pred_tokens == gold) for gold in golds)
        f1 = max(float(pred_tokens == gold) if not (pred_tokens and gold) else _token_f1(pred_tokens, gold)
                 for gold in golds)
        return f1, em
    golds = [normalize_answer(gold).split() for gold in answers]
    if not golds:
        return 0.0, 0.0
    return max(_token_f1(pred_tokens, gold) for gold in golds), max(float(pred_tokens == gold) for gold in golds)


def best_answer(windows: list[dict], context: str, allow_null: bool) -> tuple[str, float, float]:
    """Pick the answer of one example from its windows' logits. Returns `(text, best_span_score, null_score)`.

    Each window holds `start`, `end` (lists of logits) and `offsets` (character span per token, None outside the
    context)."""
    best_text, best_score, null_score = "", float("-inf"), float("inf")
    for window in windows:
        start, end, offsets = window["start"], window["end"], window["offsets"]
        null_score = min(null_score, start[0] + end[0])
        top_starts = sorted(range(len(start)), key=lambda i: -start[i])[:N_BEST]
        top_ends = sorted(range(len(end)), key=lambda i: -end[i])[:N_BEST]
        for s in top_starts:
            for e in top_ends:
                if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > MAX_ANSWER_TOKENS:
                    continue
                if start[s] + end[e] > best_score:
                    best_score = start[s] + end[e]
                    best_text = context[offsets[s][0]:offsets[e][1]]
    if allow_null and null_score > best_score:
        return "", best_score, null_score
    return best_text, best_score, null_score


# ------------------------------------------------------------------------------------------------------------ task


class QuestionAnswering(Task):
    name = "qa"

    @property
    def allow_null(self) -> bool:
        return self.spec.name in ("squad_v2",) or bool(self.spec.synthetic_kwargs.get("unanswerable"))

    @property
    def metric(self) -> QaMetric:
        """Whose official script scores this set."""
        return "squad_v2" if self.allow_null else "record" if self.spec.name == "record" else "squad"

    def _questions(self, rows: list[dict]) -> list[str]:
        """Questions cut to 64 tokens (as run_qa's max_query_length), so a window always has room for context."""
        questions = [row["question"].lstrip() for row in rows]
        encoded = self.tokenizer(questions, add_special_tokens=False)["input_ids"]
        return [q if len(ids) <= MAX_QUESTION_TOKENS else self.tokenizer.decode(ids[:MAX_QUESTION_TOKENS])
                for q, ids in zip(questions, encoded, strict=True)]

    def windows(self, rows: list[dict]) -> list[dict]:
        """Tokenised windows: input ids, gold start/end token (0 when absent), and token offsets in the context."""
        stride = min(self.qa_stride, self.max_length // 4)
        questions = self._questions(rows)
        self._check_room(questions, stride)
        encoded = self.tokenizer(
            questions, [row["context"] for row in rows], truncation="only_second",
            max_length=self.max_length, stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True,
            return_token_type_ids=self.uses_token_types,
        )
        features = []
        for index, sample in enumerate(encoded["overflow_to_sample_mapping"]):
            sequence_ids = encoded.sequence_ids(index)
            spans = encoded["offset_mapping"][index]
            offsets = [span if sequence_ids[k] == 1 else None for k, span in enumerate(spans)]
            start, end = self._gold_tokens(rows[sample]["answers"], offsets)
            feature = {"input_ids": encoded["input_ids"][index], "start_positions": start, "end_positions": end,
                       "_example": sample, "_offsets": offsets}
            if self.uses_token_types:
                feature["token_type_ids"] = encoded["token_type_ids"][index]
            features.append(feature)
        return features

    def _check_room(self, questions: list[str], stride: int) -> None:
        """A window must hold the question, the special tokens and more context than the overlap; the fast tokenizer
        panics (a Rust traceback) otherwise."""
        longest = max((len(ids) for ids in self.tokenizer(questions, add_special_tokens=False)["input_ids"]), default=0)
        room = self.max_length - longest - self.tokenizer.num_special_tokens_to_add(pair=True)
        if room <= stride:
            raise EncoderizeError(f"--max-seq-length {self.max_length} leaves {max(room, 0)} context tokens per QA "
                                  f"window "
                                  f"(questions take up to {longest}), not more than the {stride}-token overlap; "
                                  f"raise --max-seq-length to at least {longest + stride + 8}")

    @staticmethod
    def _gold_tokens(answers: dict, offsets: list) -> tuple[int, int]:
        if not answers["text"]:
            return 0, 0
        first = answers["answer_start"][0]
        last = first + len(answers["text"][0])
        inside = [k for k, span in enumerate(offsets) if span is not None]
        if not inside or offsets[inside[0]][0] > first or offsets[inside[-1]][1] < last:
            return 0, 0  # the answer is not entirely in this window
        start = next(k for k in inside if offsets[k][1] > first)
        end = next(k for k in reversed(inside) if offsets[k][0] < last)
        return start, end

    def prepare(self, splits: dict[str, list[dict]]) -> Prepared:
        return Prepared(self.windows(splits["train"]),
                        (splits["validation"], self.windows(splits["validation"])),
                        (splits["test"], self.windows(splits["test"])))

    def make_head(self, hidden_size: int) -> torch.nn.Module:
        return torch.nn.Linear(hidden_size, 2)

    def logits(self, model, head, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.hidden(model, batch)  # (B, T, H)
        logits = head(hidden.to(head.weight.dtype)).float()  # (B, T, 2)
        logits = logits.masked_fill(batch["attention_mask"].unsqueeze(-1) == 0, -1e4)  # padding never answers
        return logits[..., 0], logits[..., 1]

    def loss(self, model, head, batch: dict) -> torch.Tensor:
        start, end = self.logits(model, head, batch)
        cross_entropy = torch.nn.functional.cross_entropy
        return (cross_entropy(start, batch["start_positions"]) + cross_entropy(end, batch["end_positions"])) / 2

    @torch.inference_mode()
    def score(self, backbone, model, head, eval_set) -> Scores:
        rows, features = eval_set
        by_example = collections.defaultdict(list)
        for indices in sorted_batches([len(f["input_ids"]) for f in features], 64):
            batch = to_device(self.collate([features[i] for i in indices]), backbone.device)
            with backbone.autocast():
                start, end = self.logits(model, head, batch)
            for row, i in enumerate(indices):
                n = len(features[i]["input_ids"])
                by_example[features[i]["_example"]].append(
                    {"start": start[row, :n].tolist(), "end": end[row, :n].tolist(),
                     "offsets": features[i]["_offsets"]})
        per_example = []
        for index, row in enumerate(rows):
            text, _, _ = best_answer(by_example[index], row["context"], self.allow_null)
            f1, em = f1_and_em(text, row["answers"]["text"], self.metric)
            per_example.append({"id": row["id"], "prediction": text, "f1": 100.0 * f1, "em": 100.0 * em})
        n = len(per_example)
        return Scores(score=sum(e["f1"] for e in per_example) / n,
                      extra={"em": sum(e["em"] for e in per_example) / n}, per_example=per_example)
