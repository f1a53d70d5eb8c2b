"""The training data path: lanes (each process packs only its own rows, N processes == one), stateless per-row
masking, and the prefetching thread (token-exact resume, errors and Ctrl-C)."""

import time

import pytest
import torch
from conftest import make_tokenizer

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.data.packing import LaneStream
from hf_encoderize.data.prefetch import Prefetcher
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.objectives.phases import Masker
from hf_encoderize.objectives.targets import MaskedTokens
from hf_encoderize.training.batches import my_lanes
from hf_encoderize.training.train_config import TrainConfig

DOCUMENTS = [" ".join(f"w{(i * 7 + j) % 100}" for j in range(3 + (i * 13) % 29)) for i in range(200)]


class CountingTokenizer:
    """The test tokenizer, recording every text it tokenizes."""

    def __init__(self):
        self.inner, self.seen = make_tokenizer(), []
        self.eos_token_id, self.pad_token_id = self.inner.eos_token_id, self.inner.eos_token_id

    def __call__(self, texts, **kwargs):
        self.seen.extend(texts)
        return self.inner(texts, **kwargs)


def _stream(lanes, total=8, tokenizer=None, skip=4, seq_len=16, documents=DOCUMENTS):
    return LaneStream(tokenizer or CountingTokenizer(), seq_len, True, documents, skip, lanes, total)


def _masked(rows):
    masker = Masker(MaskedTokens(MaskingConfig()), mask_token_id=1, vocab_size=120, special_ids=[121], seed=3)
    return masker(*rows)


def test_two_processes_make_exactly_the_rows_and_masks_of_one():
    """1 process x 8 rows, 2 processes x 4 rows and 1 x 1 row x 8 accumulation steps: the same global batches, the
    same masks, step after step (also across the end of a pass over the documents)."""
    layouts = {"8x1": [(1, 0, 8, 1)], "2x4": [(2, 0, 4, 1), (2, 1, 4, 1)], "1x1x8": [(1, 0, 1, 8)]}
    batches = {}
    for name, processes in layouts.items():
        streams = [_stream(my_lanes(b, m, p, rank)) for p, rank, b, m in processes]
        steps = []
        for _ in range(40):  # 200 short documents: several passes
            parts = [stream.take() for stream in streams]
            order = torch.tensor([k[0] for part in parts for k in part[2]]).argsort()  # back to global slot order
            ids, docs = torch.cat([p[0] for p in parts])[order], torch.cat([p[1] for p in parts])[order]
            keys = [k for part in parts for k in part[2]]
            keys = [keys[i] for i in order.tolist()]
            steps.append((ids, docs, *_masked((ids, docs, keys))))
        batches[name] = steps
    assert any(s["pass"] > 0 for s in streams[0].lanes.values())  # the passes wrapped around
    for name in ("2x4", "1x1x8"):
        for step, (mine, reference) in enumerate(zip(batches[name], batches["8x1"], strict=True)):
            for a, b in zip(mine, reference, strict=True):
                assert torch.equal(a, b), (name, step)


def test_a_process_tokenizes_only_its_own_documents():
    tokenizers = [CountingTokenizer(), CountingTokenizer()]
    for rank, tokenizer in enumerate(tokenizers):
        stream = _stream(my_lanes(4, 1, 2, rank), tokenizer=tokenizer, skip=0)
        for _ in range(3):
            stream.take()
    first, second = set(tokenizers[0].seen), set(tokenizers[1].seen)
    assert first and second and not first & second
    assert {DOCUMENTS.index(t) % 8 for t in first} <= {0, 1, 2, 3}
    assert {DOCUMENTS.index(t) % 8 for t in second} <= {4, 5, 6, 7}


def test_held_out_documents_are_never_trained_on():
    tokenizer = CountingTokenizer()
    stream = _stream(list(range(8)), tokenizer=tokenizer, skip=10)
    for _ in range(60):  # several passes
        stream.take()
    assert not set(tokenizer.seen) & set(DOCUMENTS[:10])


def test_a_resumed_stream_continues_token_for_token():
    unbroken = _stream([0, 1, 2])
    reference = [unbroken.take() for _ in range(30)]
    first = _stream([0, 1, 2])
    for _ in range(11):
        first.take()
    resumed = _stream([0, 1, 2])
    resumed.load_state_dict(first.state_dict())
    for step in range(11, 30):
        ids, docs, keys = resumed.take()
        assert torch.equal(ids, reference[step][0]) and torch.equal(docs, reference[step][1])
        assert keys == reference[step][2]


def test_too_few_documents_or_tokens_say_what_to_do():
    with pytest.raises(EncoderizeError, match="has 5 training documents.*a step takes 8 rows"):
        _stream(list(range(8)), skip=0, documents=DOCUMENTS[:5]).take()
    with pytest.raises(EncoderizeError, match="do not fill one row of 512 tokens"):
        _stream([0], total=1, skip=0, seq_len=512, documents=DOCUMENTS[:3]).take()


def _prefetched(depth, state=None):
    stream = _stream([0, 1, 2, 3], total=4)
    prefetcher = Prefetcher(stream, stream.take, depth=depth)
    if state is not None:
        prefetcher.load_state_dict(state)
    return prefetcher


def test_prefetching_resumes_at_the_batch_handed_out_not_the_ones_prepared():
    reference = [_stream([0, 1, 2, 3], total=4).take()]
    stream = _stream([0, 1, 2, 3], total=4)
    reference = [stream.take() for _ in range(20)]
    ahead = _prefetched(depth=3)
    for step in range(7):
        assert torch.equal(ahead.next()[0], reference[step][0])
    time.sleep(0.2)  # the thread has run ahead by now
    state = ahead.state_dict()
    ahead.close()
    for depth in (0, 2):
        resumed = _prefetched(depth, state)
        for step in range(7, 20):
            assert torch.equal(resumed.next()[0], reference[step][0]), (depth, step)
        resumed.close()


def test_closing_rewinds_to_the_last_batch_handed_out():
    """A phase switch (pretrain) or Ctrl-C closes the prefetcher; what it had prepared is dropped and the stream goes
    on from the last batch trained on."""
    stream = _stream([0, 1, 2, 3], total=4)
    reference = [stream.take() for _ in range(8)]
    ahead = _prefetched(depth=2)
    ahead.next()
    time.sleep(0.2)
    ahead.close()
    assert torch.equal(ahead.next()[0], reference[1][0])
    ahead.close()


def test_an_error_in_the_thread_reaches_the_training_loop_and_the_thread_ends():
    stream = _stream([0], total=1)
    calls = []

    def produce():
        calls.append(1)
        if len(calls) == 3:
            raise EncoderizeError("bad row 7")
        return stream.take()

    prefetcher = Prefetcher(stream, produce, depth=2)
    prefetcher.next(), prefetcher.next()
    thread = prefetcher._thread
    with pytest.raises(EncoderizeError, match="bad row 7"):
        prefetcher.next()
    assert prefetcher._thread is None and not thread.is_alive()


def test_close_stops_a_thread_blocked_on_a_full_queue():
    prefetcher = _prefetched(depth=1)
    prefetcher.next()
    time.sleep(0.1)  # the thread is now blocked putting the next batch
    thread = prefetcher._thread
    started = time.perf_counter()
    prefetcher.close()
    assert time.perf_counter() - started < 2
    assert prefetcher._thread is None and not thread.is_alive()


def test_profile_writes_a_per_component_summary(decoder_dir, tmp_path):
    """`--torch-profile` times 3 steady steps by component and writes summary.json (+ a Chrome trace): attention
    forward and backward found by the ops that ran them, the head's backward by autograd's sequence number, the parts
    adding up to the step, and the top kernels listed."""
    import json

    from conftest import write_corpus

    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.recipes.cpt import cpt

    corpus = write_corpus(tmp_path / "docs.jsonl", 200, lambda i: 5 + i % 17)
    out = tmp_path / "run"
    cpt(LoadConfig(str(decoder_dir), attn_implementation="sdpa"),
        DataConfig(data_files=str(corpus), seq_len=32, eval_documents=0), MaskingConfig(),
        TrainConfig(output_dir=str(out), steps=7, batch_size=4, save_every=100, eval_every=0, progress=False,
                    profile=True))
    summary = json.loads((out / "profile" / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["device"] == "cpu"
    assert summary["profiled_steps"] == [4, 6]  # the last 3 of a 7-step run, not the first steps
    for part in ("attention_forward", "attention_backward", "loss", "head_backward", "optimizer", "forward_other",
                 "backward_other", "total"):
        assert summary[part] > 0, part
    parts = sum(summary[k] for k in ("attention", "loss", "head_backward", "optimizer", "data_wait", "forward_other",
                                     "backward_other"))
    assert abs(parts + summary["unaccounted"] - summary["total"]) < 1e-6
    # the sections cover the step: what they leave is the gaps between them, a few percent on a quiet machine, more
    # when two xdist workers and a neighbour preempt a 3-step window of a tiny model (over 10% in a loaded CI run),
    # so 25% here
    assert parts <= summary["total"] * 1.05 and summary["unaccounted"] < 0.25 * summary["total"]
    assert summary["attention_by_kernel_name"] == 0  # every attention op was found by the op that ran it
    assert 0 < len(summary["top_kernels"]) <= 20
    assert (out / "profile" / "trace.json").stat().st_size > 0


def test_a_run_stopped_inside_the_profile_window_writes_no_profile(decoder_dir, tmp_path, monkeypatch):
    """Ctrl-C (or an error) in the profiled steps: the run stops as any interrupted run does, the profiler is stopped,
    and no partial summary or trace is left to be read as a measurement."""
    from conftest import write_corpus

    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.recipes.cpt import cpt
    from hf_encoderize.training.engine import loop

    steps = []

    def interrupted(run, **kwargs):
        steps.append(len(steps))
        if len(steps) == 6:  # step 5: the second of the profiled steps 4-6
            raise KeyboardInterrupt
        return train_step(run, **kwargs)

    train_step = loop.train_step
    monkeypatch.setattr(loop, "train_step", interrupted)
    corpus = write_corpus(tmp_path / "docs.jsonl", 200, lambda i: 5 + i % 17)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        cpt(LoadConfig(str(decoder_dir), attn_implementation="sdpa"),
            DataConfig(data_files=str(corpus), seq_len=32, eval_documents=0), MaskingConfig(),
            TrainConfig(output_dir=str(out), steps=7, batch_size=4, save_every=100, eval_every=0, progress=False,
                        profile=True))
    assert len(steps) == 6 and not (out / "profile").exists()
    assert not torch.autograd.profiler._is_profiler_enabled
