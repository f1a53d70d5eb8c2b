"""Sequence classification (SST-2, MNLI, QQP): mean pooling over real tokens, a linear classifier, cross-entropy.

Sentence pairs are encoded as a pair (the tokenizer's own pair template). Scored with accuracy (section 2).
"""

from __future__ import annotations

import torch

from hf_encoderize.evaluation.base import Prepared, Scores, Task, mean_pool, sorted_batches, to_device


class SequenceClassification(Task):
    name = "sc"

    @property
    def num_labels(self) -> int:
        return len(self.spec.label_names)

    def featurize(self, rows: list[dict]) -> list[dict]:
        texts = [row["text"] for row in rows]
        pairs = [row["text_pair"] for row in rows]
        kwargs = dict(truncation=True, max_length=self.max_length, return_token_type_ids=self.uses_token_types)
        if all(pair is None for pair in pairs):
            encoded = self.tokenizer(texts, **kwargs)
        else:
            encoded = self.tokenizer(texts, [pair or "" for pair in pairs], **kwargs)
        features = []
        for index, row in enumerate(rows):
            feature = {"input_ids": encoded["input_ids"][index], "labels": row["label"], "_id": row["id"]}
            if self.uses_token_types:
                feature["token_type_ids"] = encoded["token_type_ids"][index]
            features.append(feature)
        return features

    def prepare(self, splits: dict[str, list[dict]]) -> Prepared:
        return Prepared(*(self.featurize(splits[name]) for name in ("train", "validation", "test")))

    def make_head(self, hidden_size: int) -> torch.nn.Module:
        return torch.nn.Linear(hidden_size, self.num_labels)

    def logits(self, model, head, batch: dict) -> torch.Tensor:
        pooled = mean_pool(self.hidden(model, batch), batch["attention_mask"])  # (B, H)
        return head(pooled.to(head.weight.dtype))  # (B, num_labels)

    def loss(self, model, head, batch: dict) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(self.logits(model, head, batch).float(), batch["labels"])

    @torch.inference_mode()
    def score(self, backbone, model, head, features: list[dict]) -> Scores:
        predictions = {}
        for indices in sorted_batches([len(f["input_ids"]) for f in features], 64):
            batch = to_device(self.collate([features[i] for i in indices]), backbone.device)
            with backbone.autocast():
                predicted = self.logits(model, head, batch).argmax(-1).tolist()
            predictions.update(zip(indices, predicted, strict=True))
        per_example = [{"id": f["_id"], "label": f["labels"], "prediction": predictions[i],
                        "correct": int(predictions[i] == f["labels"])} for i, f in enumerate(features)]
        accuracy = 100.0 * sum(e["correct"] for e in per_example) / len(per_example)
        return Scores(score=accuracy, per_example=per_example)
