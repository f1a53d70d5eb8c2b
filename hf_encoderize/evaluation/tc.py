"""Token classification (CoNLL-2003, OntoNotes 5, UNER): token-level cross-entropy on the first sub-token of each word,
scored with entity-level F1 (`evaluation.entities`: seqeval's default, conlleval rules, owned here).

Words are aligned to sub-tokens through character offsets of the space-joined sentence rather than the tokenizer's
`is_split_into_words` mode, which byte-level BPE tokenizers (GPT-2, Llama 3, SmolLM2) only allow with
`add_prefix_space`. Words cut off by `max_length` are predicted `O`.
"""

from __future__ import annotations

import torch

from hf_encoderize.evaluation.base import Prepared, Scores, Task, sorted_batches, to_device
from hf_encoderize.evaluation.entities import EntityCounts, entity_scores


def first_subtokens(words: list[str], offsets: list[tuple[int, int]]) -> list[int]:
    """For each token, the index of the word it starts, or -1 (special tokens, later sub-tokens, spaces).

    `offsets` are the character spans of the tokens in `" ".join(words)`."""
    owner = []
    for index, word in enumerate(words):
        owner += [index] * len(word) + [-1]  # the joining space belongs to no word
    starts, seen = [], set()
    for start, end in offsets:
        word = owner[end - 1] if end > start and end - 1 < len(owner) else -1
        if word >= 0 and word not in seen:
            seen.add(word)
            starts.append(word)
        else:
            starts.append(-1)
    return starts


class TokenClassification(Task):
    name = "tc"

    @property
    def tag_names(self) -> tuple[str, ...]:
        return self.spec.label_names

    def featurize(self, rows: list[dict]) -> list[dict]:
        texts = [" ".join(row["tokens"]) for row in rows]
        encoded = self.tokenizer(texts, truncation=True, max_length=self.max_length, return_offsets_mapping=True,
                                 return_token_type_ids=False)
        features = []
        for index, row in enumerate(rows):
            starts = first_subtokens(row["tokens"], encoded["offset_mapping"][index])
            labels = [row["tags"][w] if w >= 0 else -100 for w in starts]
            features.append({"input_ids": encoded["input_ids"][index], "labels": labels, "_words": starts,
                             "_id": row["id"], "_tags": row["tags"]})
        return features

    def prepare(self, splits: dict[str, list[dict]]) -> Prepared:
        return Prepared(*(self.featurize(splits[name]) for name in ("train", "validation", "test")))

    def make_head(self, hidden_size: int) -> torch.nn.Module:
        return torch.nn.Linear(hidden_size, len(self.tag_names))

    def logits(self, model, head, batch: dict) -> torch.Tensor:
        hidden = self.hidden(model, batch)  # (B, T, H)
        return head(hidden.to(head.weight.dtype))  # (B, T, num_tags)

    def loss(self, model, head, batch: dict) -> torch.Tensor:
        logits = self.logits(model, head, batch).float()
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)

    @torch.inference_mode()
    def score(self, backbone, model, head, features: list[dict]) -> Scores:
        names = self.tag_names
        gold, predicted = [], []
        per_token = {}
        for indices in sorted_batches([len(f["input_ids"]) for f in features], 64):
            batch = to_device(self.collate([features[i] for i in indices]), backbone.device)
            with backbone.autocast():
                best = self.logits(model, head, batch).argmax(-1).tolist()
            per_token.update(zip(indices, best, strict=True))
        per_example = []
        for index, feature in enumerate(features):
            tags = ["O"] * len(feature["_tags"])
            for position, word in enumerate(feature["_words"]):
                if word >= 0:
                    tags[word] = names[per_token[index][position]]
            truth = [names[t] for t in feature["_tags"]]
            gold.append(truth)
            predicted.append(tags)
            correct = sum(a == b for a, b in zip(tags, truth, strict=True))
            counts = EntityCounts.of(truth, tags)
            per_example.append({"id": feature["_id"], "prediction": tags, "word_accuracy": correct / max(1, len(tags)),
                                # micro F1 is 2 x correct / (predicted + gold) summed over sentences: kept per
                                # sentence so a bootstrap over test sentences can rebuild it (`bootstrap`)
                                "entities": [counts.correct, counts.predicted, counts.gold]})
        total = entity_scores(gold, predicted)
        extra = {"precision": 100.0 * total.precision, "recall": 100.0 * total.recall}
        return Scores(score=100.0 * total.f1, extra=extra, per_example=per_example)
