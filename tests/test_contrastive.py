"""The contrastive stage (SimCSE and supervised) through the CLI, its output in a clean environment, and bad input."""

import json
import random
import subprocess
import sys

import pytest
from conftest import make_decoder, make_tokenizer

from hf_encoderize.cli import main
from hf_encoderize.model.bidirectional import encoderize
from hf_encoderize.model.saving import save_encoder

CLEAN_CHECK = """
import json, sys
sys.modules["hf_encoderize"] = None
import torch
from sentence_transformers import SentenceTransformer
from transformers import AutoModel
out = sys.argv[1]
st = SentenceTransformer(out, device="cpu")
emb = st.encode(["w1 w2 w3", "w4 w5"], convert_to_tensor=True)
model = AutoModel.from_pretrained(out).eval()
ids = torch.tensor([[5, 6, 7, 8, 9, 10]])
changed = ids.clone(); changed[0, -1] = 11
with torch.no_grad():
    first, second = (model(input_ids=x).last_hidden_state[0, 0] for x in (ids, changed))
remote = AutoModel.from_pretrained(out, trust_remote_code=True)
print(json.dumps({"shape": list(emb.shape), "finite": bool(torch.isfinite(emb).all()),
                  "is_causal": model.config.is_causal, "moved": float((first - second).abs().max()),
                  "remote": type(remote).__name__, "prompts": st.prompts}))
"""


def _write(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root, rng = tmp_path_factory.mktemp("data"), random.Random(0)

    def words(n):
        return [rng.randrange(100) for _ in range(n)]

    text = _write(root / "text.jsonl", [{"text": " ".join(f"w{i}" for i in words(8))} for _ in range(48)])
    triplets = []
    for _ in range(48):
        anchor = words(6)
        triplets.append({"q": " ".join(f"w{i}" for i in anchor), "pos": " ".join(f"w{i}" for i in reversed(anchor)),
                         "neg": " ".join(f"w{i}" for i in words(6))})
    pairs = _write(root / "triplets.jsonl", triplets)
    one_column = _write(root / "one.jsonl", [{"q": "w1 w2"}] * 4)
    empty = _write(root / "empty.jsonl", [{"text": " "}] * 3)
    return {"text": text, "triplets": pairs, "one": one_column, "empty": empty}


def _clean_load(out):
    done = subprocess.run([sys.executable, "-c", CLEAN_CHECK, str(out)], capture_output=True, text=True, timeout=300,
                          cwd=out.parent)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_simcse_end_to_end_loads_without_hf_encoderize(encoder, data, tmp_path, capsys):
    out = tmp_path / "simcse"
    assert main(["contrastive", str(encoder), "--data-files", str(data["text"]), "--output-dir", str(out),
                 "--max-steps", "3", "--batch-size", "8"]) == 0
    record = json.loads((out / "contrastive_run.json").read_text())
    assert record["stage"]["method"] == "simcse" and len(record["losses"]) >= 1
    assert record["stage"]["training_dropout"] == {"attention_dropout": 0.3}
    config = json.loads((out / "config.json").read_text())
    assert config["attention_dropout"] == 0.0  # dropout was for training only
    assert "AutoModelForMaskedLM" not in config["auto_map"]  # no MLM head in an embedding model
    assert config["hf_encoderize"]["tokens"]  # the base encoder's record is kept
    report = _clean_load(out)
    assert report["shape"] == [2, 32] and report["finite"] and report["is_causal"] is False
    assert report["moved"] > 0 and report["remote"] == "EncoderModel"


def test_supervised_triplets_with_prefixes(encoder, data, tmp_path):
    out = tmp_path / "supervised"
    assert main(["contrastive", str(encoder), "--method", "supervised", "--data-files", str(data["triplets"]),
                 "--anchor-column", "q", "--positive-column", "pos", "--negative-column", "neg",
                 "--query-prefix", "w90 ", "--loss", "cached_mnrl", "--mini-batch-size", "4",
                 "--pooling", "lasttoken", "--output-dir", str(out), "--max-steps", "3", "--batch-size", "8"]) == 0
    assert json.loads((out / "1_Pooling" / "config.json").read_text())["pooling_mode"] == "lasttoken"
    assert _clean_load(out)["prompts"]["query"] == "</s></s>w90 "  # the lead tokens, then the instruction


@pytest.mark.parametrize("case, extra, wording", [
    ("missing column", ["--text-column", "body"], "column(s) 'body' not in the data"),
    ("one column for supervised", ["--method", "supervised", "--anchor-column", "q"], "column(s) 'positive'"),
    ("empty source", [], "usable row(s)"),
    ("bad objective", ["--method", "triplet"], "--method: invalid choice: 'triplet' (choose from"),
])
def test_bad_input_is_one_line(encoder, data, tmp_path, capsys, case, extra, wording):
    source = {"missing column": "text", "one column for supervised": "one", "empty source": "empty",
              "bad objective": "text"}[case]
    out = tmp_path / "out"
    try:
        code = main(["contrastive", str(encoder), "--data-files", str(data[source]), "--output-dir", str(out), *extra])
    except SystemExit as refused:  # a value outside the option's Literal: argparse's choices refuse it
        code = refused.code
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and wording in err[0], err
    assert not out.exists()


def test_a_bf16_encoder_trains_on_fp32_master_weights_and_is_saved_in_bf16(data, tmp_path, monkeypatch):
    """An encoder saved in bf16 (cpt saves in the loaded dtype) used to train in pure bf16: AdamW's updates below
    ~0.4% of a weight rounded to nothing. The full fine-tune now sees fp32 weights, and the output is bf16 again."""
    import torch
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformerTrainer

    model, tokenizer = make_decoder(), make_tokenizer()
    report = encoderize(model, tokenizer)
    source = save_encoder(model.to(torch.bfloat16), tokenizer, tmp_path / "bf16-encoder", metadata=report.to_dict())
    seen, train = [], SentenceTransformerTrainer.train

    def recording(trainer, *args, **kwargs):
        seen.append({p.dtype for p in trainer.model.parameters() if p.requires_grad})
        return train(trainer, *args, **kwargs)

    monkeypatch.setattr(SentenceTransformerTrainer, "train", recording)
    out = tmp_path / "simcse"
    assert main(["contrastive", str(source), "--data-files", str(data["text"]), "--output-dir", str(out),
                 "--max-steps", "2", "--batch-size", "8", "--no-progress"]) == 0
    assert seen == [{torch.float32}]
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    assert {t.dtype for t in load_file(out / "model.safetensors").values()} == {torch.bfloat16}


@pytest.mark.parametrize("precision, autocast", [("bf16", True), ("auto", False), ("no", False)])
def test_mixed_precision_bf16_autocasts_on_cpu_over_fp32_master_weights(encoder, data, tmp_path, monkeypatch,
                                                                         precision, autocast):
    """`--mixed-precision bf16` trains under bf16 autocast on a CPU too (about 1.8x faster where the CPU has native
    bf16); the weights the optimizer updates stay fp32 and the model is saved in the encoder's own dtype. `auto`
    (the default) and `no` keep a CPU run in fp32, as before."""
    import torch
    from safetensors.torch import load_file
    from sentence_transformers import SentenceTransformerTrainer

    seen, compute_loss = [], SentenceTransformerTrainer.compute_loss

    def recording(trainer, model, inputs, *args, **kwargs):
        linear_outputs = set()  # the dtype the model's linear layers computed in: autocast's, else the weights'
        hooks = [m.register_forward_hook(lambda _m, _in, out: linear_outputs.add(out.dtype))
                 for m in model.modules() if isinstance(m, torch.nn.Linear)]
        try:
            loss = compute_loss(trainer, model, inputs, *args, **kwargs)
        finally:
            for hook in hooks:
                hook.remove()
        seen.append((linear_outputs == {torch.bfloat16 if autocast else torch.float32},
                     {p.dtype for p in model.parameters() if p.requires_grad}, bool(torch.isfinite(loss))))
        return loss

    monkeypatch.setattr(SentenceTransformerTrainer, "compute_loss", recording)
    out = tmp_path / precision
    assert main(["contrastive", str(encoder), "--data-files", str(data["text"]), "--output-dir", str(out),
                 "--max-steps", "2", "--batch-size", "8", "--no-progress", "--mixed-precision", precision]) == 0
    assert seen and all(row == (True, {torch.float32}, True) for row in seen), seen
    assert {t.dtype for t in load_file(out / "model.safetensors").values()} == {torch.float32}
