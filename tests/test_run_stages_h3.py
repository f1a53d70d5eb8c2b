"""`run` holds the configs of the stages it runs (issue 70 point 3): `RunConfig.contrastive` is the `contrastive`
command's `ContrastiveConfig`, `RunConfig.eval` the `eval` command's `EvalConfig`, and `run`'s prefixed options are
generated from that nesting (`common.stages`), in flags and config files alike. The contrastive method is `method`
everywhere, its earlier name `objective` read as it."""

import dataclasses

import pytest
import yaml

from hf_encoderize.cli import COMMANDS, build_parser, main
from hf_encoderize.common.arguments import parse_args
from hf_encoderize.common.config_file import build_configs
from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.common.identity import settings_diff
from hf_encoderize.common.results import effective_yaml
from hf_encoderize.evaluation.config import EvalConfig
from hf_encoderize.pipeline.run import RunConfig, RunEvalConfig
from hf_encoderize.recipes.contrastive import ContrastiveConfig
from hf_encoderize.recipes.contrastive.resume import recorded_settings


def run_config(argv=(), file: str = "") -> RunConfig:
    """`run m ARGV --config FILE`'s RunConfig, as the CLI builds it."""
    args = parse_args(build_parser(only="run"), ["run", "m", *argv])
    return next(c for c in build_configs(COMMANDS["run"], args, yaml.safe_load(file) or {})
                if isinstance(c, RunConfig))


def test_run_holds_its_stages_configs_and_declares_none_of_their_options():
    names = [field.name for field in dataclasses.fields(RunConfig)]
    assert not [name for name in names if name.startswith(("contrastive_", "eval_"))], names
    run = run_config(["--contrastive", "simcse", "--contrastive-max-steps", "5", "--eval-profile", "smoke"])
    assert isinstance(run.contrastive, ContrastiveConfig) and isinstance(run.eval, EvalConfig)
    assert (run.contrastive.method, run.contrastive.steps, run.eval.profile) == ("simcse", 5, "smoke")
    assert run_config().contrastive is None and run_config(["--eval-profile", "none"]).eval is None


def test_every_option_of_a_stage_is_an_option_of_run_but_where_run_decides():
    """A stage that gains an option gains it in `run` too: every field of the stage's class, prefixed, but the
    folders run itself decides (the contrastive stage's encoder and output, the evaluation's output and name)."""
    run = build_parser(only="run")._subparsers._group_actions[0].choices["run"]
    flags = set(run._option_string_actions)
    contrastive = {f.name for f in dataclasses.fields(ContrastiveConfig)}
    assert {"--contrastive-pooling", "--contrastive-hard-negatives", "--contrastive-seed"} <= flags
    assert {"--eval-batch-size", "--eval-ndcg-gains", "--eval-device"} <= flags
    assert not {"--contrastive-encoder", "--contrastive-output-dir", "--eval-output-dir", "--eval-name"} & flags
    assert len([f for f in flags if f.startswith("--contrastive-")]) >= len(contrastive) - 4 - 1  # less the 4 fixed


def test_the_nested_and_the_flat_config_file_give_one_run():
    flat = run_config(file="contrastive: simcse\ncontrastive_steps: 7\ncontrastive_lr: 0.001\neval_profile: smoke\n"
                           "eval_seeds: [0, 1]\neval_base: none\n")
    nested = run_config(file="contrastive:\n  method: simcse\n  max_steps: 7\n  learning_rate: 0.001\n"
                             "eval:\n  profile: smoke\n  seeds: [0, 1]\n  base: none\n")
    assert flat == nested
    assert (nested.contrastive.steps, nested.contrastive.learning_rate, nested.eval.seeds) == (7, 0.001, "0,1")
    assert nested.eval.base == "none" and isinstance(nested.eval, RunEvalConfig)


def test_print_config_reads_back_as_the_same_run():
    run = run_config(["--contrastive", "simcse", "--contrastive-max-steps", "3", "--eval-profile", "smoke",
                      "--eval-frozen"])
    text = effective_yaml([run])
    assert "contrastive:\n  method: simcse\n" in text and "eval:\n  profile: smoke\n" in text
    assert run_config(file=text) == run
    assert run_config(file=effective_yaml([run_config(["--eval-profile", "none"])])).eval is None
    edited = text.replace("  data_files: null\n", "  data_files: pairs.jsonl\n")  # the file edited to name data
    assert run_config(file=edited).contrastive.data_files == "pairs.jsonl"


@pytest.mark.parametrize("argv, said", [
    (["--contrastive", "simcse", "--contrastive-max-steps", "0"], "--contrastive-max-steps must be at least 1"),
    (["--contrastive", "simcse", "--contrastive-teacher", "t"], "--contrastive-teacher is the model --contrastive "
                                                                 "distill learns from"),
    (["--contrastive", "supervised"], "--contrastive supervised needs --contrastive-data-files"),
    (["--contrastive-max-steps", "3"], "--contrastive-max-steps set with --contrastive none"),
    (["--eval-profile", "none", "--eval-seeds", "0", "--eval-base", "causal"],
     "--eval-seeds, --eval-base set with --eval-profile none"),
    (["--eval-seeds", "0,x"], "--eval-seeds takes comma-separated numbers"),
])
def test_a_stage_s_refusal_speaks_run_s_flags(argv, said):
    with pytest.raises(EncoderizeError) as refused:
        run_config(argv)
    assert said in str(refused.value)


def test_run_s_old_spellings_still_work(capsys, tmp_path):
    run = run_config(["--contrastive", "simcse", "--contrastive-steps", "4", "--contrastive-lr", "0.01",
                      "--eval-lrs", "1e-4"])
    assert (run.contrastive.steps, run.contrastive.learning_rate, run.eval.lrs) == (4, 0.01, "1e-4")
    file = tmp_path / "old.yaml"
    file.write_text("contrastive: simcse\ncontrastive_objective: distill\n")
    assert main(["run", "m", "--config", str(file), "--print-config"]) == 2  # two values of one option, refused
    assert "contrastive: simcse and contrastive_objective: distill" in capsys.readouterr().err


def test_contrastive_s_method_was_its_objective():
    """The field is `method`, as its flag, record and card say; `--objective` and a file's `objective:` still work."""
    assert "method" in {f.name for f in dataclasses.fields(ContrastiveConfig)}
    assert "objective" not in {f.name for f in dataclasses.fields(ContrastiveConfig)}
    args = parse_args(build_parser(only="contrastive"), ["contrastive", "enc", "--objective", "supervised"])
    config = build_configs(COMMANDS["contrastive"], args, {"data_files": "p.jsonl"})[0]
    assert config.method == "supervised"
    args = parse_args(build_parser(only="contrastive"), ["contrastive", "enc"])
    assert build_configs(COMMANDS["contrastive"], args, {"objective": "distill", "teacher": "t",
                                                         "data_files": "p.jsonl"})[0].method == "distill"


def test_a_stage_recorded_with_objective_is_compared_by_its_method():
    """A contrastive folder made before the rename recorded `objective`; a resume or a reuse by `run` must still
    see another method, not skip the key it no longer finds."""
    before = recorded_settings({"objective": "simcse", "steps": 4})
    assert settings_diff(before, {"method": "distill", "steps": 4}) == ["method was 'simcse', now 'distill'"]
    assert settings_diff(before, {"method": "simcse", "steps": 4}) == []
