"""Row packing: documents -> fixed-length rows of token ids with a document id per token.

Design choices:
- Every document gets EOS appended and is packed into rows of `seq_len` tokens with per-document ids (-1 on padding),
  so the attention can keep documents apart (that part is `isolation`). A document longer than what is left in a row
  continues in the next row as a new segment. `pack=False` pads one document per row instead (truncated): for
  `--no-pack`, and for hybrids whose state-space layers would carry state from one packed document into the next.
- The packer's state (documents consumed, tokens carried over) is a small dict. `Packer` exposes it through
  `state_dict`/`load_state_dict`, so the training engine registers it with Accelerate's checkpointing next to the
  scheduler, and a resumed run continues from exactly the same token.
- `LaneStream` is the endless training stream, in lanes: slot j of every step's global batch packs its own share of
  the documents (j, j + L, ...), so each process tokenizes only its own rows and N processes equal one. It skips the
  held-out documents (and `--skip-documents` more), and each lane starts a new pass over its documents when they run
  out, with a loud warning: the paper trains on unique tokens. An optional seeded shuffle buffer reorders the
  training documents per pass. `held_out_batches` packs the held-out documents once, for evaluation.
"""

from __future__ import annotations

import collections
import itertools
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.data.sources import too_few_documents

Row = tuple[list[int], list[int]]  # (input_ids, document_ids), both seq_len long


def _fresh_state() -> dict:
    return {"documents": 0, "carry": [], "carry_doc": []}


@dataclass
class Packer:
    """Turns documents into packed rows of `seq_len` tokens, resumably.

    `state` = documents consumed so far and the tokens (with their document ids) carried into the next row.

    >>> from transformers import PreTrainedTokenizerFast
    >>> from tokenizers import Tokenizer, models, pre_tokenizers
    >>> backend = Tokenizer(models.WordLevel({"a": 0, "b": 1, "c": 2, "</s>": 3, "<pad>": 4}, unk_token="a"))
    >>> backend.pre_tokenizer = pre_tokenizers.Whitespace()
    >>> tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", pad_token="<pad>")
    >>> packer = Packer(tokenizer, seq_len=4)
    >>> list(packer.rows(iter(["a b", "c", "b b c"]), flush=True))
    [([0, 1, 3, 2], [0, 0, 0, 1]), ([3, 1, 1, 2], [0, 1, 1, 1]), ([3, 4, 4, 4], [0, -1, -1, -1])]
    >>> packer.state_dict()
    {'documents': 3, 'carry': [], 'carry_doc': []}

    `pack=False` pads one document per row instead, truncated to `seq_len` (the padding gets document id -1, so it is
    never masked or labelled, and attention keeps it apart from the document):

    >>> list(Packer(tokenizer, seq_len=4, pack=False).rows(iter(["a b", "c b b c"]), flush=True))
    [([0, 1, 3, 4], [0, 0, 0, -1]), ([2, 1, 1, 2], [0, 0, 0, 0])]
    """

    tokenizer: object
    seq_len: int
    pack: bool = True
    state: dict = field(default_factory=_fresh_state)

    def state_dict(self) -> dict:
        return {"documents": self.state["documents"], "carry": list(self.state["carry"]),
                "carry_doc": list(self.state["carry_doc"])}

    def load_state_dict(self, state: dict) -> None:
        self.state = {"documents": int(state["documents"]), "carry": list(state["carry"]),
                      "carry_doc": list(state["carry_doc"])}

    def reset(self) -> None:
        self.state = _fresh_state()

    def _tokens(self, text: str) -> list[int]:
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        return ids + [self.tokenizer.eos_token_id]

    def rows(self, documents: Iterator[str], skip: int = 0, flush: bool = False) -> Iterator[Row]:
        """Yield `(input_ids, document_ids)` rows; document ids are -1 on padding.

        `skip` documents are passed over (the held-out slice); `flush` also yields the last, partly filled row.
        """
        ids, docs = list(self.state["carry"]), list(self.state["carry_doc"])
        start = skip + self.state["documents"]
        for index, text in enumerate(documents):
            if index < start:
                continue
            self.state["documents"] += 1
            tokens = self._tokens(text)[: self.seq_len] if not self.pack else self._tokens(text)
            doc_id = (docs[-1] + 1) if docs else 0
            ids = ids + tokens  # new lists: the saved state must never alias the working buffer
            docs = docs + [doc_id] * len(tokens)
            while len(ids) >= self.seq_len or (not self.pack and ids):
                row, row_docs = ids[: self.seq_len], docs[: self.seq_len]
                ids, docs = ids[self.seq_len :], docs[self.seq_len :]
                self.state["carry"], self.state["carry_doc"] = ids, docs
                yield _pad(row, row_docs, self.seq_len, self.tokenizer.pad_token_id)
        if flush and ids:
            self.state["carry"], self.state["carry_doc"] = [], []
            yield _pad(ids, docs, self.seq_len, self.tokenizer.pad_token_id)


def _pad(row: list[int], docs: list[int], seq_len: int, pad_id: int) -> Row:
    missing = seq_len - len(row)
    first = docs[0] if docs else 0
    return row + [pad_id] * missing, [d - first for d in docs] + [-1] * missing


def collate(rows: list[Row]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack rows into `(input_ids, document_ids)`, both (B, T) long tensors.

    >>> input_ids, document_ids = collate([([5, 6, 2, 0], [0, 0, 0, -1]), ([7, 2, 8, 2], [0, 0, 1, 1])])
    >>> input_ids.tolist(), document_ids.tolist(), input_ids.dtype
    ([[5, 6, 2, 0], [7, 2, 8, 2]], [[0, 0, 0, -1], [0, 0, 1, 1]], torch.int64)
    """
    # On the host whatever the default device (`torch.set_default_device("cuda")`): the engine pins and copies them.
    return torch.tensor([r[0] for r in rows], device="cpu"), torch.tensor([r[1] for r in rows], device="cpu")


def shuffled(items: Iterable, buffer: int, seed) -> Iterator:
    """`items` in a seeded buffer-shuffled order (the streaming shuffle of `datasets.IterableDataset.shuffle`, for
    any iterable): each item is drawn at random from a buffer of `buffer` items. The same seed gives the same order.

    >>> list(shuffled(range(6), 1, 0)), sorted(shuffled(range(6), 3, 0)) == list(range(6))
    ([0, 1, 2, 3, 4, 5], True)
    """
    if buffer <= 1:
        yield from items
        return
    generator, pool = random.Random(str(seed)), []
    for item in items:
        if len(pool) < buffer:
            pool.append(item)
            continue
        index = generator.randrange(buffer)
        yield pool[index]
        pool[index] = item
    generator.shuffle(pool)
    yield from pool


def _fresh_lane() -> dict:
    empty = np.zeros(0, dtype=np.int64)
    # furthest: the source position (after --skip-documents) of the furthest document this lane read in this pass;
    # under --shuffle-buffer it runs ahead of the shuffled order, and `data_position` continues after it.
    return {"pass": 0, "documents": 0, "rows": 0, "pass_rows": 0, "furthest": -1, "carry": empty, "carry_doc": empty}


class LaneStream:
    """The endless training rows of one process: one row per lane it owns at every `take()`.

    A step's global batch has `total_lanes` rows (batch_size x processes x grad_accum). Slot j of every step comes
    from lane j, which packs the training documents j, j + L, j + 2L, ... (L = total_lanes, counted after the
    held-out documents) and starts its own new pass over them when they run out (dropping its partial row). So a
    process tokenizes and packs only its own lanes' documents, and a lane's rows do not depend on the process that
    holds it: N processes produce exactly the rows of one. Every row comes with its key `(lane, row number)`, which
    seeds its mask (`objectives.row_seed`).

    The state (per lane: pass, documents consumed, the furthest one in the source's order, rows made, tokens carried)
    is small; `snapshot()` is a cheap copy for the prefetching thread (carries are numpy arrays never changed in
    place) and `state_dict()` its JSON.
    On resume, the reader re-reads from the earliest document any lane still needs, so nothing is skipped or repeated.
    """

    def __init__(self, tokenizer, seq_len: int, pack: bool, documents: Iterable[str], skip: int, lanes: list[int],
                 total_lanes: int, shuffle_buffer: int = 0, seed: int = 0, warn: Callable[[str], None] | None = None):
        self.tokenizer, self.seq_len, self.pack = tokenizer, seq_len, pack
        self.documents, self.skip, self.total_lanes = documents, skip, total_lanes
        self.shuffle_buffer, self.seed, self.warn = shuffle_buffer, seed, warn
        self._announced: set[int] = set()
        self.lanes = {lane: _fresh_lane() for lane in lanes}
        self.queues: dict[int, collections.deque] = {lane: collections.deque() for lane in lanes}
        self._reader: Iterator | None = None
        self._known_documents: int | None = None  # training documents in one pass, once a pass has been read

    def take(self) -> tuple[torch.Tensor, torch.Tensor, list[tuple[int, int]]]:
        """The next row of every owned lane, in lane order: `(input_ids, document_ids, keys)`, (lanes, seq_len)."""
        rows, keys = [], []
        for lane, state in self.lanes.items():
            rows.append(self._next_row(lane, state))
            keys.append((lane, state["rows"]))
            state["rows"] += 1
        input_ids, document_ids = collate(rows)
        return input_ids, document_ids, keys

    def _next_row(self, lane: int, state: dict) -> Row:
        while not self._row_ready(state):
            self._add_document(lane, state)
        take = self.seq_len if self.pack else min(self.seq_len, len(state["carry"]))
        row, docs = state["carry"][:take], state["carry_doc"][:take]
        state["carry"], state["carry_doc"] = state["carry"][take:], state["carry_doc"][take:]
        if not self.pack:  # one document per row: whatever is left of it (beyond seq_len) is dropped
            state["carry"], state["carry_doc"] = state["carry"][:0], state["carry_doc"][:0]
        state["pass_rows"] += 1
        return _pad(row.tolist(), docs.tolist(), self.seq_len, self.tokenizer.pad_token_id)

    def _row_ready(self, state: dict) -> bool:
        return len(state["carry"]) >= self.seq_len or (not self.pack and len(state["carry"]) > 0)

    def _add_document(self, lane: int, state: dict) -> None:
        while not self.queues[lane]:
            self._read_more(lane)
        passes, origin, tokens = self.queues[lane].popleft()
        if passes != state["pass"]:  # this lane's documents ran out: a new pass, its partial row dropped
            if state["pass_rows"] == 0:
                raise EncoderizeError(f"the training documents do not fill one row of {self.seq_len} tokens per lane "
                                      f"({self.total_lanes} lanes: batch size x processes x accumulation); add data, "
                                      "or lower --max-seq-length or --batch-size")
            self._announce(passes)
            empty = state["carry"][:0]
            state.update({"pass": passes, "documents": 0, "pass_rows": 0, "furthest": -1, "carry": empty,
                          "carry_doc": empty})
        first = int(state["carry_doc"][-1]) + 1 if len(state["carry_doc"]) else 0
        state["documents"] += 1
        state["furthest"] = max(int(state.get("furthest", -1)), origin)
        state["carry"] = np.concatenate([state["carry"], tokens])
        state["carry_doc"] = np.concatenate([state["carry_doc"], np.full(len(tokens), first, dtype=np.int64)])

    def _announce(self, passes: int) -> None:
        """Say loudly, once, that the documents ran out and training repeats them: a small corpus starts a new pass
        every few steps, and a line for each would bury everything else (the run record counts them)."""
        if self.warn is not None and not self._announced:
            self._announced.add(passes)
            self.warn(f"warning: the training documents ran out ({self._known_documents or '?'} after the skipped and "
                      f"held-out ones): pass {passes + 1} over them begins, so training now repeats tokens (the paper "
                      "trains on unique tokens, section 2); add data or lower --max-steps. Later passes are not "
                      "announced: the run record counts them.")

    def _read_more(self, lane: int) -> None:
        """Read documents in order until `lane` has one queued, tokenizing the owned ones in one batch."""
        if self._reader is None:
            self._reader = self._read()
        owned: list[tuple[int, int, int, str]] = []
        for passes, index, origin, text in self._reader:
            owned.append((passes, index % self.total_lanes, origin, text))
            if index % self.total_lanes == lane:
                break
        encoded = self.tokenizer([text for *_, text in owned], add_special_tokens=False)["input_ids"]
        for (passes, owner, origin, _), ids in zip(owned, encoded, strict=True):
            tokens = np.asarray(ids + [self.tokenizer.eos_token_id], dtype=np.int64)
            self.queues[owner].append((passes, origin, tokens if self.pack else tokens[: self.seq_len]))

    def _read(self) -> Iterator[tuple[int, int, int, str]]:
        """Owned documents `(pass, index, origin, text)` from the earliest one a lane still needs, pass after pass:
        `index` in the pass's (shuffled) order, which deals them to the lanes; `origin` in the source's order."""
        needed = {lane: (s["pass"], lane + s["documents"] * self.total_lanes) for lane, s in self.lanes.items()}
        passes, start = min(needed.values())
        while True:
            count = 0
            source = itertools.islice(iter(self.documents), self.skip, None)
            # a seeded order per pass; a resumed reader re-reads its pass in the same order
            for index, (origin, text) in enumerate(shuffled(enumerate(source), self.shuffle_buffer,
                                                            (self.seed, passes))):
                count = index + 1
                if index < start or index % self.total_lanes not in needed:
                    continue
                if (passes, index) >= needed[index % self.total_lanes]:
                    yield passes, index, origin, text
            self._check_pass(count)
            passes, start = passes + 1, 0

    def _check_pass(self, count: int) -> None:
        if self._known_documents is None and count:
            self._known_documents = count
        if not count or count < self.total_lanes:
            raise EncoderizeError(too_few_documents(count, self.total_lanes))

    def snapshot(self) -> dict:
        """The lanes' state, cheaply (for the prefetching thread): carries are shared, never changed in place."""
        return {lane: dict(state) for lane, state in self.lanes.items()}

    def state_dict(self, snapshot: dict | None = None) -> dict:
        lanes = self.snapshot() if snapshot is None else snapshot
        return {str(lane): {**{k: int(v) for k, v in s.items() if not k.startswith("carry")},
                            "carry": s["carry"].tolist(), "carry_doc": s["carry_doc"].tolist()}
                for lane, s in lanes.items()}

    def load_state_dict(self, state: dict) -> None:
        """Restore the owned lanes from a checkpoint holding every lane (saved from all processes)."""
        for lane in self.lanes:
            saved = state[str(lane)]
            self.lanes[lane] = {**{k: int(v) for k, v in saved.items() if not k.startswith("carry")},
                                "carry": np.asarray(saved["carry"], dtype=np.int64),
                                "carry_doc": np.asarray(saved["carry_doc"], dtype=np.int64)}
            self.queues[lane].clear()
        self._reader = None


def held_out_batches(documents: Iterable[str], packer: Packer, count: int, max_rows: int, batch_size: int) -> list:
    """The first `count` documents, packed (`max_rows` rows at most) and collated in batches: the held-out set."""
    rows = packer.rows(itertools.islice(iter(documents), count), flush=True)
    held_out = list(itertools.islice(rows, max_rows))
    return [collate(held_out[i : i + batch_size]) for i in range(0, len(held_out), batch_size)]


def data_position(lanes: dict, total_lanes: int, skipped: int) -> dict:
    """Where the training stream stands, from every lane's state (`LaneStream.state_dict`, gathered): the passes
    completed over the training documents and, in the first pass, the `--skip-documents` value that continues the
    stream after every document read so far: after the furthest one in the source's order, which under
    --shuffle-buffer lies ahead of the shuffled order. Documents not read by then (a lagging lane's, those still in the
    shuffle buffer) are skipped, never repeated.
    """
    passes = max(int(s["pass"]) for s in lanes.values())
    # A lane state saved before `furthest` existed (-1 or missing) read in the source's order (its formula).
    read = [int(s.get("furthest", -1)) if int(s.get("furthest", -1)) >= 0 else
            int(lane) + (int(s["documents"]) - 1) * total_lanes
            for lane, s in lanes.items() if int(s["pass"]) == passes and int(s["documents"])]
    following = skipped + max(read) + 1 if read else skipped
    return {"passes_completed": passes, "next_document": following if passes == 0 else None}
