"""Every float and int option of every command goes through the one number check (issue 28 step 1, issue 30).

The table is derived from the config dataclasses of `hf_encoderize.cli.COMMANDS`, so a new numeric field is covered the
day it is declared. For each field NaN, inf, -inf, -1, 0 and an int64 overflow (for whole numbers) are given through
`main([...])`, as a flag and as a YAML value: exit 2, exactly one `error:` line naming the option, no traceback. The
command's function is replaced by one that refuses: a value that slips past the configs' `__post_init__` reaches it
and the case fails, so nothing trains or loads either way.
"""

import dataclasses

import pytest

from hf_encoderize import cli
from hf_encoderize.common import stages
from hf_encoderize.common.arguments import value_type
from hf_encoderize.common.options import flag, option_name

# Fields where 0 is a legitimate value, each with the reason. Every other numeric field must refuse 0.
ZERO_ALLOWED = {
    "eval_documents": "no held-out documents: no held-out loss",
    "skip_documents": "start at the first document",
    "shuffle_buffer": "0 turns shuffling off",
    "warmup_steps": "no warmup",
    "eval_every": "0 never evaluates during training",
    "seed": "0 is a seed like any other",
    "prefetch": "0 turns the background prefetch off",
    "lora_r": "0 trains the full model (no LoRA)",
    "hard_negatives": "0 mines no hard negatives",
    "weight_decay": "no weight decay",
    "warmup_ratio": "no warmup",
    "dropout": "SimCSE without dropout noise (supervised pairs need none)",
    "contrastive_steps": "quickstart: 0 makes no embedding model (run refuses 0: it has --contrastive none)",
    "adam_beta1": "Adam without momentum",
    "adam_beta2": "the AdamW bound allows [0, 1)",
    "port": "0 asks the OS for any free port",
    "distill_contrastive_weight": "0 distils alone, without the in-batch contrastive loss",
    "distill_variants": "0 distils the texts alone, no one-word edits",
    "distill_synonyms": "0 distils without near-synonym edits",
}
# Fields where inf is a legitimate value: none today; a field that needs it is named here with its reason.
INF_ALLOWED: dict[str, str] = {}
# Values just past the top of a bounded range (the generic rows only probe the bottom and overflow).
ABOVE_THE_TOP = {
    "mask_ratio": 1.0, "dropout": 1.0, "warmup_ratio": 1.0, "decay_fraction": 1.5,
    "adam_beta1": 1.0,
    "adam_beta2": 1.0, "port": 65536, "seed": 2**32,
}
_DUMMY_POSITIONALS = {"source": "no-such-model-dir", "output_dir": "no-such-out", "encoder": "no-such-encoder",
                      "results_dirs": "no-such-results", "repo_id": "user/model", "space_id": "user/space"}
_REQUIRED = {"contrastive": ["--data-files", "no-such-data.jsonl"],
             "pretrain": ["--model-config", "210M", "--tokenizer", "no-such-tokenizer"]}
# options that belong to one setting of another: given alone, they are refused for that reason, not their value
_SETTING = {"distill_contrastive_weight": ["--method", "distill", "--teacher", "some/teacher"],
            "distill_variants": ["--method", "distill", "--teacher", "some/teacher"],
            "distill_synonyms": ["--method", "distill", "--teacher", "some/teacher"]}
# a stage's options under the command that runs it (`run --contrastive-max-steps`): the stage on, as its setting needs
for _option in ("distill_contrastive_weight", "distill_variants", "distill_synonyms"):
    _SETTING[f"contrastive_{_option}"] = ["--contrastive", "distill", "--contrastive-teacher", "some/teacher"]
STAGE_RULES: dict[str, str] = {}  # `contrastive_seed` -> `seed`: a stage's option follows its own field's rules


def _numeric_fields() -> list[tuple[str, str, type]]:
    """(command, field name, int or float) for every numeric field of every command's configs; a stage's options
    (`common.stages`) by the name the command gives them (`contrastive_max_steps`)."""
    rows = []
    for name, command in cli.COMMANDS.items():
        for cls in command.configs:
            for field in dataclasses.fields(cls):
                for option, inner in _options(cls, field):
                    kind, _ = value_type(inner)
                    if kind in (int, float):
                        rows.append((name, option, kind))
    return rows


def _options(cls, field) -> list:
    """(name, field) of a config field, or of each option of the stage it holds."""
    if not stages.stage_of(field):
        return [(field.name, field)]
    options = [(stages.key(cls, field, sub), sub) for sub in stages.stage_fields(cls, field)]
    STAGE_RULES.update({option: sub.name for option, sub in options})
    if field.name == "contrastive":
        _SETTING.update({option: ["--contrastive", "simcse"] for option, _ in options if option not in _SETTING})
    return options


def _values(configs) -> dict:
    """Every setting of `configs` by the name the rows above give it (a stage's prefixed)."""
    values = {}
    for config in configs:
        for field in dataclasses.fields(config):
            held = getattr(config, field.name)
            if stages.stage_of(field) and held is not None:
                values.update({stages.key(type(config), field, sub): getattr(held, sub.name)
                               for sub in stages.stage_fields(type(config), field)})
            values[field.name] = held
    return values


FIELDS = _numeric_fields()
NAMES = {field.name: option_name(cls, field) for command in cli.COMMANDS.values() for cls in command.configs
         for field in dataclasses.fields(cls) if field.kw_only}


def _base_argv(command: str, tmp_path, field: str | None = None) -> list[str]:
    positional = [field.name for cls in cli.COMMANDS[command].configs for field in dataclasses.fields(cls)
                  if not field.kw_only]
    return [command, *(str(tmp_path / _DUMMY_POSITIONALS[name]) if "/" not in _DUMMY_POSITIONALS[name]
                       else _DUMMY_POSITIONALS[name] for name in positional), *_REQUIRED.get(command, []),
            *_SETTING.get(field, [])]


@pytest.fixture(scope="module")
def parser():
    return cli.build_parser()  # built once: it reads every field's docstring, 0.4 s a time, and ~1500 calls follow


@pytest.fixture(autouse=True)
def _no_work(monkeypatch, parser):
    """The command itself refuses to run: a value that passed every config check surfaces as this error."""
    def reached(*configs):
        raise cli.EncoderizeError("the configs accepted the value and the command ran")

    monkeypatch.setattr(cli, "build_parser", lambda only=None: parser)
    for name, command in cli.COMMANDS.items():
        monkeypatch.setitem(cli.COMMANDS, name, dataclasses.replace(command, function=reached))


def _assert_one_line(argv: list[str], names: tuple[str, ...], capsys) -> None:
    code = cli.main(argv)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert code == 2 and "Traceback" not in err, (argv, err)
    assert len(lines) == 1 and lines[0].startswith("error:"), (argv, err)
    assert any(name in lines[0] for name in names), (argv, err)


def _bad_values(field: str, kind: type) -> list:
    field = STAGE_RULES.get(field, field)
    values = [float("nan"), float("-inf"), -1]
    values += [float("inf")] if field not in INF_ALLOWED else []
    values += [0] if field not in ZERO_ALLOWED else []
    values += [2**63] if kind is int else []  # past int64: an overflow in torch, numpy or the OS
    values += [ABOVE_THE_TOP[field]] if field in ABOVE_THE_TOP else []
    return values


def _flag(field: str) -> str:
    """The field's flag: its public name (`--learning-rate` for `lr`), the same in every command that has it."""
    return flag(NAMES.get(field, field))


def _yaml_scalar(value) -> str:
    return {"nan": ".nan", "inf": ".inf", "-inf": "-.inf"}.get(str(value), str(value))


@pytest.mark.parametrize(("command", "field", "kind"), FIELDS, ids=[f"{c}-{f}" for c, f, _ in FIELDS])
def test_every_bad_number_is_one_line_naming_the_option(command, field, kind, tmp_path, capsys):
    for value in _bad_values(field, kind):
        config = tmp_path / "options.yaml"
        config.write_text(f"{field}: {_yaml_scalar(value)}\n")
        _assert_one_line([*_base_argv(command, tmp_path, field), "--config", str(config)], (_flag(field), repr(field)),
                         capsys)
        if kind is float or isinstance(value, int):  # argparse itself refuses `--max-steps nan` for an int option
            _assert_one_line([*_base_argv(command, tmp_path, field), f"{_flag(field)}={value}"], (_flag(field),),
                             capsys)


@pytest.mark.parametrize(("command", "field", "kind"), [row for row in FIELDS if row[2] is float],
                         ids=[f"{c}-{f}" for c, f, k in FIELDS if k is float])
def test_a_float_written_as_yaml_text_is_a_number(command, field, kind, tmp_path, monkeypatch):
    """YAML 1.1 reads `1e-4` (no dot) as text; a float option takes it as the number it spells."""
    seen = {}

    def record(*configs):
        seen.update(_values(configs))
        raise cli.EncoderizeError("recorded")  # stop here: nothing to load or report

    monkeypatch.setitem(cli.COMMANDS, command, dataclasses.replace(cli.COMMANDS[command], function=record))
    config = tmp_path / "options.yaml"
    config.write_text(f"{field}: 1e-4\n")
    cli.main([*_base_argv(command, tmp_path, field), "--config", str(config)])
    assert seen[field] == 1e-4 and type(seen[field]) is float


def test_the_table_covers_the_known_options():
    """The derivation finds the fields the issues name (a broken derivation would make the table above vacuous)."""
    found = {(command, field) for command, field, _ in FIELDS}
    assert {("contrastive", "learning_rate"), ("contrastive", "scale"), ("contrastive", "seed"),
            ("contrastive", "max_rows"), ("cpt", "lr"), ("space", "port")} <= found
    assert set(ZERO_ALLOWED) | set(INF_ALLOWED) | set(ABOVE_THE_TOP) <= {field for _, field, _ in FIELDS}
