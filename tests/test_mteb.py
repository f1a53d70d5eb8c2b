"""`eval --mteb`: MTEB's own retrieval evaluation on a local BEIR folder, offline, checked against an independent
NDCG@10 of the same embeddings, with the contrastive stage's prompts (lead tokens, query prefix) applied."""

import json
import math
import random

import pytest
from conftest import make_decoder, make_tokenizer

from hf_encoderize.cli import main
from hf_encoderize.model.bidirectional import encoderize
from hf_encoderize.model.saving import save_encoder

pytest.importorskip("mteb")


def _write(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def embedding_model(tmp_path_factory):
    """A tiny encoder after 3 supervised contrastive steps: lead-token prompts and a query prefix of its own."""
    root, rng = tmp_path_factory.mktemp("mteb_model"), random.Random(0)
    model, tokenizer = make_decoder(), make_tokenizer()
    encoder = save_encoder(model, tokenizer, root / "encoder", metadata=encoderize(model, tokenizer).to_dict())
    pairs = [{"q": " ".join(f"w{rng.randrange(100)}" for _ in range(4)),
              "p": " ".join(f"w{rng.randrange(100)}" for _ in range(8))} for _ in range(32)]
    data = _write(root / "pairs.jsonl", pairs)
    out = root / "embedder"
    assert main(["contrastive", str(encoder), "--method", "supervised", "--data-files", str(data),
                 "--anchor-column", "q", "--positive-column", "p", "--query-prefix", "w99 ", "--output-dir", str(out),
                 "--max-steps", "3", "--batch-size", "8"]) == 0
    return out


@pytest.fixture(scope="module")
def beir(tmp_path_factory):
    """A BEIR folder: 40 documents, 12 queries, graded judgements (1 and 2) on a few documents each."""
    root, rng = tmp_path_factory.mktemp("beir") / "toyret", random.Random(1)
    docs = {f"d{i}": " ".join(f"w{rng.randrange(100)}" for _ in range(rng.randrange(4, 12))) for i in range(40)}
    queries = {f"q{i}": " ".join(f"w{rng.randrange(100)}" for _ in range(3)) for i in range(12)}
    qrels = {q: {d: rng.choice((1, 2)) for d in rng.sample(sorted(docs), rng.randrange(1, 5))} for q in queries}
    _write(root / "corpus.jsonl", [{"_id": d, "title": "", "text": t} for d, t in docs.items()])
    _write(root / "queries.jsonl", [{"_id": q, "text": t} for q, t in queries.items()])
    lines = ["query-id\tcorpus-id\tscore"]
    lines += [f"{q}\t{d}\t{g}" for q, judged in qrels.items() for d, g in judged.items()]
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n")
    return root, docs, queries, qrels


def ndcg_at_10(model, docs, queries, qrels) -> float:
    """trec_eval's NDCG@10 (linear gains), written independently of mteb, on the model's own prompts."""
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(model), device="cpu")
    ids = list(docs)
    q = st.encode([queries[k] for k in qrels], prompt_name="query", convert_to_tensor=True, normalize_embeddings=True)
    d = st.encode([docs[k] for k in ids], prompt_name="document", convert_to_tensor=True, normalize_embeddings=True)
    total = 0.0
    for row, judged in zip(q @ d.T, qrels.values(), strict=True):
        top = [ids[i] for i in row.topk(10).indices.tolist()]
        dcg = sum(judged.get(doc, 0) / math.log2(rank + 2) for rank, doc in enumerate(top))
        ideal = sorted(judged.values(), reverse=True)[:10]
        total += dcg / sum(g / math.log2(rank + 2) for rank, g in enumerate(ideal))
    return 100 * total / len(qrels)


def test_mteb_scores_a_local_beir_folder_like_an_independent_ndcg(embedding_model, beir, tmp_path, capsys):
    folder, docs, queries, qrels = beir
    prompts = json.loads((embedding_model / "config_sentence_transformers.json").read_text())["prompts"]
    assert prompts["query"] == "</s></s>w99 " and prompts["document"] == "</s></s>"  # mteb must apply both
    assert main(["eval", str(embedding_model), "--mteb", str(folder), "--output-dir", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "embedder" / "mteb" / "summary.json").read_text())
    row = summary["tasks"]["toyret"]
    assert row["main_score"] == "ndcg_at_10" and set(row["splits"]) == {"test"}
    assert row["score"] == pytest.approx(ndcg_at_10(embedding_model, docs, queries, qrels), abs=0.006)
    result = json.loads((tmp_path / "embedder" / "mteb" / "toyret.json").read_text())
    assert result["task_name"] == "toyret" and "recall_at_10" in result["scores"]["test"][0]
    assert "| toyret | ndcg_at_10 |" in capsys.readouterr().out
    # Another model under the same name is refused; the first model's results stay.
    other = tmp_path / "other" / "embedder"
    other.mkdir(parents=True)
    for item in embedding_model.iterdir():
        (other / item.name).symlink_to(item)
    assert main(["eval", str(other), "--mteb", str(folder), "--output-dir", str(tmp_path)]) == 2
    assert "holds MTEB results of another model" in capsys.readouterr().err
    assert json.loads((tmp_path / "embedder" / "mteb" / "summary.json").read_text()) == summary


def _broken(root, what):
    folder = root / "broken"
    _write(folder / "corpus.jsonl", [{"_id": "d1", "text": "w1 w2"}])
    _write(folder / "queries.jsonl", [{"_id": "q1", "text": "w3"}] if what != "no_text" else [{"_id": "q1"}])
    (folder / "qrels").mkdir()
    header = "query-id\tcorpus-id\tscore\n" if what != "no_header" else ""
    doc = "d9" if what == "unknown_doc" else "d1"
    (folder / "qrels" / "test.tsv").write_text(header + f"q1\t{doc}\t1\n")
    return folder


@pytest.mark.parametrize("case, wording", [
    ("NoSuchTaskAnywhere", "unknown MTEB task NoSuchTaskAnywhere"),
    ("SciFact", "cannot load the data of SciFact"),  # HF_HUB_OFFLINE=1: the Hub task is refused before the model
    ("missing/folder", "is not a folder"),
    ("no_header", "must start with the header"),
    ("unknown_doc", "judges document 'd9', which is not in corpus.jsonl"),
    ("no_text", "has no text field"),
])
def test_bad_mteb_input_is_one_line(embedding_model, tmp_path, capsys, monkeypatch, case, wording):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    target = str(_broken(tmp_path, case)) if case in ("no_header", "unknown_doc", "no_text") else case
    assert main(["eval", str(embedding_model), "--mteb", target, "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()  # progress lines may come first ("mteb: loading SciFact from the Hub")
    last = err.splitlines()[-1]
    assert last.startswith("error:") and wording in last and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()  # refused before anything was written


def test_mteb_does_not_push(embedding_model, tmp_path, capsys):
    assert main(["eval", str(embedding_model), "--mteb", "SciFact", "--push-to-hub", "me/x"]) == 2
    assert "eval --mteb does not push" in capsys.readouterr().err


def test_mteb_results_reach_the_card_and_its_model_index(embedding_model, beir, tmp_path):
    """Issue 66 point 4: a run's embedding model scored by `eval --mteb` shows its scores in the card; an MTEB task
    enters `model-index` as mteb itself converts it (`TaskResult.get_hf_eval_results`), a local collection only the
    card's body, marked."""
    import shutil
    import warnings

    import mteb
    import yaml
    from hub_server import make_run_folder
    from huggingface_hub import ModelCard

    run = make_run_folder(tmp_path, evaluated=False, base_evaluated=False)
    shutil.copytree(embedding_model, run / "contrastive")
    record = json.loads((run / "contrastive" / "contrastive_run.json").read_text())
    (run / "contrastive" / "contrastive_run.json").write_text(json.dumps({**record, "source": str(run / "encoder")}))
    assert main(["eval", str(run / "contrastive"), "--mteb", str(beir[0])]) == 0
    out = run / "eval" / "contrastive" / "mteb"
    # An MTEB Hub task's result, as mteb writes it (the Hub is offline here: written through mteb's own type)
    sts = mteb.TaskResult.from_task_results(mteb.get_task("STS12"), {"test": {"default": {
        "main_score": 0.61234, "cosine_spearman": 0.61234}}}, evaluation_time=1.0)
    (out / "STS12.json").write_text(json.dumps(sts.to_dict()))
    summary = json.loads((out / "summary.json").read_text())
    summary["tasks"]["STS12"] = {"main_score": "cosine_spearman", "splits": {"test": 61.23}, "score": 61.23}
    (out / "summary.json").write_text(json.dumps(summary))
    assert main(["card", str(run / "contrastive")]) == 0
    readme = run / "contrastive" / "README.md"
    text = readme.read_text()
    assert "### MTEB (zero-shot)" in text and "| STS12 | cosine_spearman | test | 61.23 |" in text
    toyret = summary["tasks"]["toyret"]["splits"]["test"]
    assert f"| toyret (local collection: not in the metadata) | ndcg_at_10 | test | {toyret:.2f} |" in text
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = sts.get_hf_eval_results()
    assert ModelCard.load(readme).data.eval_results == expected  # mteb's own form, nothing else
    index = yaml.safe_load(text.split("---\n")[1])["model-index"][0]["results"]
    assert [r["dataset"]["type"] for r in index] == ["mteb/sts12-sts"]
