"""The paper's training recipe, point by point (issue: the paper's protocol): the WSD lengths of section 2, CPT
budgets branched from one run, the data stream (a pass that ends is loud; a continuation skips what was read; a
seeded shuffle buffer), and intermediate encoders exported for Figure 4."""

import json

import pytest
import torch
from conftest import make_tokenizer, write_corpus
from safetensors.torch import load_file

from hf_encoderize.cli import main
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.data.packing import LaneStream, data_position
from hf_encoderize.data.sources import DataConfig
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.recipes.cpt import cpt
from hf_encoderize.training.batches import my_lanes
from hf_encoderize.training.schedule import wsd_factor
from hf_encoderize.training.train_config import TrainConfig

DOCUMENTS = [" ".join(f"w{i % 100}" for _ in range(3 + i % 5)) for i in range(120)]  # document i is made of w{i}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("data") / "docs.jsonl", 400, lambda i: 6 + i % 12)


def _cpt(decoder_dir, corpus, out, **train):
    data = DataConfig(data_files=str(corpus), seq_len=32, eval_documents=16)
    settings = dict(output_dir=str(out), steps=6, batch_size=4, lr=1e-3, save_every=2, keep_last=10, eval_every=0,
                    log_every=100, progress=False, warmup_steps=2, decay_steps=2)
    return cpt(LoadConfig(str(decoder_dir)), data, MaskingConfig(), TrainConfig(**{**settings, **train}))


def _weights(folder):
    return load_file(folder / "model.safetensors")


def _assert_same(a, b):
    assert a.keys() == b.keys()
    for name, tensor in a.items():
        torch.testing.assert_close(b[name], tensor, msg=name)


# ------------------------------------------------------------------------------------------------ schedule


def test_schedule_defaults_are_the_papers_2000_steps():
    """Section 2: 2,000 warmup steps and decay over the final 2,000 at 12k, 22k and 42k; short runs are capped."""
    for steps in (12000, 22000, 42000):
        assert (TrainConfig(steps=steps).warmup, TrainConfig(steps=steps).decay) == (2000, 2000)
    assert (TrainConfig(steps=80).warmup, TrainConfig(steps=80).decay) == (16, 16)
    assert TrainConfig(steps=12000, decay_fraction=0.05).decay == 600  # the fraction option is kept
    assert TrainConfig(steps=2000, warmup_steps=2000, decay_steps=2000).decay == 2000
    factors = [wsd_factor(s, 42000, 2000, 2000) for s in (0, 1999, 2000, 39999, 40000, 41999)]
    assert factors == pytest.approx([1 / 2000, 1.0, 1.0, 1.0, 1.0, 1 / 2000])  # zero only after the last step
    with pytest.raises(EncoderizeError, match="not both"):
        TrainConfig(decay_steps=100, decay_fraction=0.1)
    with pytest.raises(EncoderizeError, match="--decay-steps 5000 is more than --max-steps 2000"):
        TrainConfig(steps=2000, decay_steps=5000)


# ------------------------------------------------------------------------------------------------ branching


def test_cpt_branch_equals_the_unbroken_shorter_run(decoder_dir, corpus, tmp_path):
    """A 6-step budget branched at step 4 of an 8-step run (both decaying over their final 2 steps) ends with the
    weights of an unbroken 6-step run: the paper's CPT budgets share one run (section 5: 26,000 steps in all)."""
    _cpt(decoder_dir, corpus, tmp_path / "long", steps=8)
    _cpt(decoder_dir, corpus, tmp_path / "short", steps=6)
    _cpt(decoder_dir, corpus, tmp_path / "branch", steps=6,
         from_checkpoint=str(tmp_path / "long" / "checkpoints" / "step-0000004"))
    _assert_same(_weights(tmp_path / "short" / "encoder"), _weights(tmp_path / "branch" / "encoder"))
    steps = [json.loads(line)["step"] for line in (tmp_path / "branch" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3, 4, 5, 6, 6]  # the source's eval before its first step and its first 4 steps, then
    # its own (6 twice: train + eval)
    record = json.loads((tmp_path / "branch" / "run_record.json").read_text())
    assert record["from_checkpoint"].endswith("step-0000004") and record["decay_steps"] == 2


def test_cpt_branch_refuses_a_decayed_or_different_source(decoder_dir, corpus, tmp_path, capsys):
    source = tmp_path / "source"
    _cpt(decoder_dir, corpus, source, steps=8)
    base = ["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-seq-length", "32", "--batch-size", "4",
            "--learning-rate",
            "1e-3", "--warmup-steps", "2", "--decay-steps", "2", "--eval-documents", "16", "--no-progress"]
    cases = {
        "step-0000006": (["--max-steps", "7"], "past the start of a learning-rate decay (step 5)"),  # 7 - 2
        "step-0000004": (["--max-steps", "6", "--learning-rate", "2e-3"], "lr was 0.001, now 0.002"),
    }
    for checkpoint, (extra, message) in cases.items():
        out = tmp_path / f"from-{checkpoint}"
        code = main([*base, *extra, "--output-dir", str(out), "--from-checkpoint",
                     str(source / "checkpoints" / checkpoint)])
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("error:") == 1 and "Traceback" not in err, err
        assert not out.exists()


# ------------------------------------------------------------------------------------------------ data stream


def _documents_of(stream_rows, tokenizer):
    """The document numbers (w-ids, see DOCUMENTS) in a row's tokens."""
    ids = stream_rows[0].flatten().tolist()
    return {int(tokenizer.convert_ids_to_tokens(i)[1:]) for i in ids if i < 100}


def test_continuation_skips_what_the_first_run_read():
    """`data_position.next_document` -> `--skip-documents`: the next run starts after every document read so far."""
    tokenizer = make_tokenizer()
    first = LaneStream(tokenizer, 16, True, DOCUMENTS, 4, list(range(4)), 4)
    seen = set()
    for _ in range(2):  # about 20 documents of the 100 with their own word
        seen |= _documents_of(first.take(), tokenizer)
    position = data_position(first.state_dict(), 4, skipped=0)
    assert position["passes_completed"] == 0 and position["next_document"] > 0
    after = LaneStream(tokenizer, 16, True, DOCUMENTS, 4 + position["next_document"], list(range(4)), 4)
    fresh = set()
    for _ in range(2):
        fresh |= _documents_of(after.take(), tokenizer)
    assert not seen & fresh and min(fresh) == 4 + position["next_document"]


def test_a_pass_that_ends_warns_once_and_is_counted():
    messages = []
    stream = LaneStream(make_tokenizer(), 16, True, DOCUMENTS[:40], 4, [0, 1], 2, warn=messages.append)
    for _ in range(60):
        stream.take()
    position = data_position(stream.state_dict(), 2, skipped=0)
    assert position["passes_completed"] >= 2 and position["next_document"] is None
    assert len(messages) == 1  # once, as the second pass begins (issue 49, point 5); the record counts the rest
    assert "Later passes are not announced: the run record counts them" in messages[0]
    assert messages[0].startswith("warning: the training documents ran out (36 after") and "pass 2" in messages[0]


def test_shuffle_buffer_is_seeded_exact_on_resume_and_across_processes():
    def stream(lanes, seed=0, buffer=16):
        return LaneStream(make_tokenizer(), 16, True, DOCUMENTS, 4, lanes, 4, shuffle_buffer=buffer, seed=seed)

    plain = [stream(range(4), buffer=0).take()[0] for _ in range(6)]
    mixed = [stream(range(4)).take()[0] for _ in range(6)]
    again = [stream(range(4)).take()[0] for _ in range(6)]
    other = [stream(range(4), seed=1).take()[0] for _ in range(6)]
    assert all(torch.equal(a, b) for a, b in zip(mixed, again, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(mixed, plain, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(mixed, other, strict=True))
    unbroken = stream(range(4))
    rows = [unbroken.take()[0] for _ in range(30)]  # several passes, each in its own order
    broken = stream(range(4))
    for _ in range(11):
        broken.take()
    resumed = stream(range(4))
    resumed.load_state_dict(json.loads(json.dumps(broken.state_dict())))
    assert all(torch.equal(resumed.take()[0], row) for row in rows[11:])
    halves = [stream(my_lanes(2, 1, 2, rank)) for rank in (0, 1)]
    for row in rows[:10]:
        assert torch.equal(torch.cat([half.take()[0] for half in halves]), row)


# ------------------------------------------------------------------------------------------------ exports


def test_export_steps_save_encoders_without_changing_the_run(decoder_dir, corpus, tmp_path):
    from transformers import AutoModel

    _cpt(decoder_dir, corpus, tmp_path / "plain")
    _cpt(decoder_dir, corpus, tmp_path / "exported", export_steps="2,4", keep_last=1)
    _assert_same(_weights(tmp_path / "plain" / "encoder"), _weights(tmp_path / "exported" / "encoder"))
    exports = sorted(p.name for p in (tmp_path / "exported" / "exports").iterdir())
    assert exports == ["step-0000002", "step-0000004"]  # kept, whatever --save-total-limit prunes
    two, four = (_weights(tmp_path / "exported" / "exports" / f"step-000000{n}") for n in (2, 4))
    final = _weights(tmp_path / "exported" / "encoder")
    assert two.keys() == four.keys() == final.keys()
    assert not torch.equal(two["model.norm.weight"], four["model.norm.weight"])  # the model as it was at each step
    assert not torch.equal(four["model.norm.weight"], final["model.norm.weight"])
    folder = tmp_path / "exported" / "exports" / "step-0000002"
    config = json.loads((folder / "config.json").read_text())
    assert config["is_causal"] is False and config["hf_encoderize"]["export_step"] == 2
    model = AutoModel.from_pretrained(folder).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    changed = ids.clone()
    changed[0, 3] = 9
    assert not torch.allclose(model(ids).last_hidden_state[0, 0], model(changed).last_hidden_state[0, 0])


def test_pretrain_exports_a_clm_phase_checkpoint_and_trains_on(tmp_path):
    """An export during the CLM phase is saved bidirectional (the paper fine-tunes every checkpoint that way) while
    the run itself stays causal until its switch: its final weights equal a run without exports."""
    from hf_encoderize.recipes.pretrain import PretrainConfig, pretrain

    tokenizer = make_tokenizer()
    tokenizer.save_pretrained(tmp_path / "tokenizer")
    from conftest import make_decoder

    make_decoder().config.to_json_file(tmp_path / "config.json")
    write_corpus(tmp_path / "docs.jsonl", 300, lambda i: 6 + i % 12)

    def run(out, **extra):
        spec = PretrainConfig(model_config=str(tmp_path / "config.json"), tokenizer=str(tmp_path / "tokenizer"),
                              schedule="clm:0.5,mlm:0.5")
        data = DataConfig(data_files=str(tmp_path / "docs.jsonl"), seq_len=32, eval_documents=16)
        train = TrainConfig(output_dir=str(out), steps=6, batch_size=4, lr=3e-3, save_every=100, eval_every=0,
                            log_every=100, progress=False, **extra)
        pretrain(spec, data, MaskingConfig(), train)

    run(tmp_path / "plain")
    run(tmp_path / "exported", export_steps="2")
    _assert_same(_weights(tmp_path / "plain" / "encoder"), _weights(tmp_path / "exported" / "encoder"))
    config = json.loads((tmp_path / "exported" / "exports" / "step-0000002" / "config.json").read_text())
    assert config["is_causal"] is False and config["hf_encoderize"]["phases"] == "clm"


def test_bad_export_steps_are_one_line(decoder_dir, corpus, tmp_path, capsys):
    base = ["cpt", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "6", "--output-dir",
            str(tmp_path / "x")]
    for value, message in (("0", "--export-steps 0 is outside 1..5"), ("6", "--export-steps 6 is outside 1..5"),
                           ("5k", "give whole steps separated by commas")):
        assert main([*base, "--export-steps", value]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------------------ recipes


def _dry_run(script, runs, **env):
    """The commands a paper recipe would launch (LAUNCH=echo), one list of arguments per command."""
    import os
    import shlex
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    result = subprocess.run(["bash", str(root / "examples" / "paper" / script)], capture_output=True, text=True,
                            env={**os.environ, "RUNS": str(runs), "LAUNCH": "echo hf-encoderize", **env}, check=True)
    return [shlex.split(line)[1:] for line in result.stdout.splitlines() if line.startswith("hf-encoderize ")]


def _flag(command, name):
    return command[command.index(name) + 1] if name in command else None


def test_pfs_recipe_follows_the_paper(tmp_path):
    commands = _dry_run("pfs.sh", tmp_path)
    assert len(commands) == 2 + 3 * 3 + 2 * 2  # base runs, 3 splits x 3 budgets, 100% cells of 12k and 22k
    for command in commands:
        assert ((_flag(command, "--learning-rate"), _flag(command, "--warmup-steps"), _flag(command,
                                                                                           "--decay-steps")) ==
            ("5e-4", "2000", "2000") and "--decay-fraction" not in command)
        assert int(_flag(command, "--batch-size")) * 8 * int(_flag(command,
                                                                   "--gradient-accumulation-steps")) * 2048 == 2_359_296
    bases = [c for c in commands if "--from-checkpoint" not in c]
    assert [_flag(c, "--export-steps") for c in bases] == ["1000,2000,5000,10000,20000,40000"] * 2
    switches = sorted(int(_flag(c, "--from-checkpoint")[-7:]) for c in commands if "clm0." in _flag(c, "--output-dir"))
    assert switches == [3000, 5000, 6000, 9000, 10000, 11000, 17000, 21000, 32000]  # Appendix C.3's whole thousands


def test_cpt_recipe_branches_budgets_and_continues_the_data(tmp_path):
    for base in ("clm-42000", "mlm-42000"):
        (tmp_path / "610M" / base).mkdir(parents=True)
        record = {"data_position": {"passes_completed": 0, "next_document": 4321}}
        (tmp_path / "610M" / base / "run_record.json").write_text(json.dumps(record))
    commands = _dry_run("cpt.sh", tmp_path)
    assert [int(_flag(c, "--max-steps")) for c in commands] == [22000, 12000, 2000] * 2
    assert sum(int(_flag(c, "--max-steps")) for c in commands[:3]) - 10000 == 26000  # section 5: 26,000 steps a base
    assert _flag(commands[1], "--from-checkpoint").endswith("cpt-clm-42000-22000/checkpoints/step-0010000")
    assert all(_flag(c, "--skip-documents") == "4321" and _flag(c, "--decay-steps") == "2000" for c in commands)
