"""One vocabulary: the public name of every option, the one the CLI, config files and docs use.

Design choices:
- A config field keeps its Python name (`TrainConfig.lr`: the library API, checkpoints and run records use it); what a
  user types is the name in `OPTION_NAMES`, the spelling of the HF ecosystem for the concept (transformers'
  `TrainingArguments` and `run_mlm.py`, sentence-transformers), one name per concept across every command:

  learning rate `--learning-rate` (was `--lr`; eval's sweep `--learning-rates`, was `--lrs`); optimizer steps
  `--max-steps` (was `--steps`); tokens per row or input `--max-seq-length` (was `--seq-len`, eval's `--max-length`);
  `--adam-epsilon` (was `--adam-eps`); `--gradient-accumulation-steps` (was `--grad-accum`); `--mlm-probability` (was
  `--mask-ratio`); `--save-steps`, `--logging-steps`, `--eval-steps`, `--save-total-limit` (were `--save-every`,
  `--log-every`, `--eval-every`, `--keep-last`); `--max-train-samples`, `--max-eval-samples` (were `--max-rows`,
  `--eval-max-rows`, eval's `--max-eval-examples`); the torch profiler `--torch-profile` (was cpt's `--profile`, while
  eval's `--profile` is the evaluation protocol); push's Hub options `--hub-private`, `--hub-revision`,
  `--hub-commit-message`, `--hub-create-pr`, as cpt's (were `--private`, ...: `--revision` is the revision of a model to
  load elsewhere); the encoder's Hub repo is `--model-id` in card as in push-space (card's was `--repo-id`), beside
  `--base-model-id` and `--embedding-model-id`; the folder that card, export, push and space read is `run_dir` (was
  `output_dir`, the name of what cpt writes). docs/commands.md holds the table.
  `run` prefixes its later stages' options the same way (`--contrastive-learning-rate`, `--eval-learning-rates`).
- Three short spellings are first-class, shown in `--help` beside the long name and never warned about: `--steps`,
  `--lr` and `--seq-len` (`SHORT_SPELLINGS`), the ones the mission's own command line types and the Python fields use
  (`TrainConfig(steps=, lr=)`, `DataConfig(seq_len=)`). The other old spellings stay as hidden aliases that print one
  deprecation line. Either way, two spellings of one option given different values are refused in one line naming
  both (flags: `arguments`; config files, where the option name or the field name may be used: `config_file`).
- `did_you_mean` is the one suggestion for a mistyped name, for flags and config-file keys alike.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing

# field name -> option name, for every config class (one concept, one name)
OPTION_NAMES = {
    "lr": "learning_rate", "lrs": "learning_rates", "eval_lrs": "eval_learning_rates",
    "contrastive_lr": "contrastive_learning_rate",
    "steps": "max_steps", "contrastive_steps": "contrastive_max_steps",
    "seq_len": "max_seq_length", "max_length": "max_seq_length",
    "adam_eps": "adam_epsilon", "grad_accum": "gradient_accumulation_steps", "mask_ratio": "mlm_probability",
    "save_every": "save_steps", "log_every": "logging_steps", "eval_every": "eval_steps",
    "keep_last": "save_total_limit",
    "max_rows": "max_train_samples", "eval_max_rows": "max_eval_samples", "max_eval_examples": "max_eval_samples",
}
# option name -> its short spelling, accepted and shown in --help on every command that has the option, no warning
SHORT_SPELLINGS = {"max_steps": "steps", "learning_rate": "lr", "max_seq_length": "seq_len"}
# option name -> the name transformers' `TrainingArguments` (or `run_mlm.py`) gives the same setting: accepted as a
# flag and a config-file key on every command that has the option, shown in --help beside ours, never warned about
TRAINER_NAMES = {"batch_size": "per_device_train_batch_size", "compile": "torch_compile",
                 "push_to_hub": "hub_model_id", "resume": "resume_from_checkpoint", "dataset": "dataset_name",
                 "data_files": "train_file"}
# a Trainer flag that sets one of our options to one value: `--bf16` is `--mixed-precision bf16` (and `bf16: true`)
TRAINER_SWITCHES = {"bf16": ("mixed_precision", "bf16"), "fp16": ("mixed_precision", "fp16")}
# field name -> option name, only for fields of the class of that name (or a subclass): the same field name means
# another thing elsewhere (`revision` of a model to load, `profile` the evaluation protocol)
CLASS_OPTION_NAMES = {
    "TrainConfig": {"profile": "torch_profile"},
    "PushOptions": {"private": "hub_private", "revision": "hub_revision", "commit_message": "hub_commit_message",
                    "create_pr": "hub_create_pr"},
    "CardConfig": {"repo_id": "model_id"},  # the encoder's Hub repo: push-space's --model-id, beside --base-model-id
}
# positional fields: the folder card, export, push and space read is a run (or encoder) folder, not an output
POSITIONAL_NAMES = {"output_dir": "run_dir"}


def option_name(cls, field) -> str:
    """The public name (underscored) of `field` of config class `cls`."""
    if not field.kw_only:
        return POSITIONAL_NAMES.get(field.name, field.name)
    for klass in cls.__mro__:
        if field.name in CLASS_OPTION_NAMES.get(klass.__name__, {}):
            return CLASS_OPTION_NAMES[klass.__name__][field.name]
    return OPTION_NAMES.get(field.name, field.name)


def spellings(name: str) -> list[str]:
    """Every name option `name` goes by on the command line and in a config file: its own, its short spelling, the
    Trainer's (`batch_size`, `per_device_train_batch_size`)."""
    return [name, *(other for other in (SHORT_SPELLINGS.get(name), TRAINER_NAMES.get(name)) if other)]


def flag(name: str) -> str:
    """`max_seq_length` -> `--max-seq-length`."""
    return f"--{name.replace('_', '-')}"


def closest(word: str, known) -> str | None:
    """The one of `known` closest to a mistyped `word`, if any is close: the one suggestion for flags and config-file
    keys alike."""
    close = difflib.get_close_matches(word, list(known), n=1)
    return close[0] if close else None


def public_flag(text: str) -> str:
    """`--steps` -> `--max-steps`: a flag a message builds from a field name, spelled as users type it."""
    name = text.removeprefix("--").replace("-", "_")
    return flag(OPTION_NAMES[name]) if text.startswith("--") and name in OPTION_NAMES else text


def did_you_mean(word: str, known) -> str:
    """`"did you mean 'seq_len'? "` for the closest of `known` to `word`, else ""."""
    match = closest(word, known)
    return f"did you mean {match!r}? " if match else ""


def choices_of(cls, name: str) -> tuple:
    """The values of the `Literal` declared on field `name` of dataclass `cls`: the one place an enumerated option's
    values live, read by validation (`validation.check_choice`), the CLI (`choices`/usage) and the docs.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Demo:
    ...     pooling: typing.Literal["mean", "lasttoken"] = "mean"
    >>> choices_of(Demo, "pooling")
    ('mean', 'lasttoken')
    """
    field = next((f for f in dataclasses.fields(cls) if f.name == name), None)
    values = choices(cls, field) if field is not None else None
    if not values:
        raise TypeError(f"{cls.__name__}.{name} is not declared as a Literal")
    return values


def choices(cls, field) -> tuple | None:
    """The values a field takes when its type is a `Literal` (`Literal['mean', 'cls'] | None`), else None."""
    try:
        hint = typing.get_type_hints(cls).get(field.name)
    except Exception:  # an annotation that does not resolve here: no choices to show, validation still runs
        return None
    for part in (hint, *typing.get_args(hint)):
        if typing.get_origin(part) is typing.Literal:
            return typing.get_args(part)
        if typing.get_origin(part) is list and typing.get_args(part):
            inner = typing.get_args(part)[0]
            if typing.get_origin(inner) is typing.Literal:
                return typing.get_args(inner)
    return None
