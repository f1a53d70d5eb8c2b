"""A new training command is one new subpackage and one CLI row (issue 52).

`toy_recipe` below is written into a package of its own, outside hf_encoderize: MLM continued pretraining of the top
decoder layers only (a toy: the recipe's shape, not a method). It declares what the recipe interface asks
(`training.recipe.Recipe`: settings as fields, five verbs, its typed settings, the names it writes) and is given one
row of the CLI's table. It then trains through the runner, writes its record and encoder, `card` writes its model
card, and `--overwrite` replaces its folder: nothing in hf_encoderize names it.
"""

import json
import re
from pathlib import Path

from conftest import write_corpus
from safetensors.torch import load_file

TOY_RECIPE = '''
"""`toy`: MLM continued pretraining of the top `--top-layers` decoder layers only, the rest frozen."""

import dataclasses
import json
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path

from hf_encoderize.common.identity import identity_of
from hf_encoderize.common.locks import releasing_locks
from hf_encoderize.common.outputs import input_paths
from hf_encoderize.model.bidirectional import PACKED, EncoderizeReport
from hf_encoderize.model.loading import LoadConfig, load_tokenizer
from hf_encoderize.objectives.phases import masked_phase
from hf_encoderize.objectives.targets import build_target
from hf_encoderize.recipes.cpt import load_encoderized
from hf_encoderize.records.encoder_facts import EncoderFacts
from hf_encoderize.records.run_settings import CptSettings
from hf_encoderize.training.lora import AdapterConfig
from hf_encoderize.training.recipe import Built, FinalModel, run_settings
from hf_encoderize.training.runner import run_recipe


@dataclass
class ToyConfig:
    """What the toy trains."""

    _: KW_ONLY
    top_layers: int = 1
    """How many of the top decoder layers train; the others stay as loaded."""


@dataclass(frozen=True, kw_only=True)
class ToySettings(CptSettings):
    """cpt's settings, and the layers that trained."""

    top_layers: int | None = None


@dataclass(frozen=True, kw_only=True)
class ToyBuilt(Built):
    report: EncoderizeReport


@dataclass(frozen=True, kw_only=True)
class Toy:
    load: LoadConfig
    data: object
    masking: object
    train: object
    toy: ToyConfig
    target: object
    output_dir: Path
    inputs: list
    phases: list
    command: str = "toy"
    switches_attention: bool = False
    scores_starting_model: bool = True
    extendable: bool = False
    start_files: dict = field(default_factory=dict)
    outputs: tuple = ("frozen_layers.json",)
    summary_extra: dict = field(default_factory=dict)
    curve_title: str = "toy: top layers only"

    def check_launch(self, accelerator):
        pass

    def load_tokenizer(self):
        return load_tokenizer(self.load)

    def build(self, accelerator) -> ToyBuilt:
        model, tokenizer, report = load_encoderized(self.load, self.data, self.train, AdapterConfig(), accelerator)
        layers = model.model.layers
        for parameter in model.parameters():
            parameter.requires_grad_(False)
        for parameter in layers[len(layers) - self.toy.top_layers:].parameters():
            parameter.requires_grad_(True)
        settings = run_settings(ToySettings, self.data, self.masking, self.train, base_model=self.load.source,
                                top_layers=self.toy.top_layers,
                                identity=identity_of(self.load, self.data, self.masking, self.train, self.toy))
        return ToyBuilt(model=model, tokenizer=tokenizer, settings=settings, report=report,
                        data=dataclasses.replace(self.data, pack=report.packing == PACKED),
                        export_facts=lambda step: EncoderFacts(), export_dtype=model.dtype)

    def check_branch(self, checkpoint, built):
        pass

    def final_model(self, run, built, trained, weights) -> FinalModel:
        model = run.accelerator.unwrap_model(run.model).model
        frozen = len(model.model.layers) - self.toy.top_layers
        (run.output_dir / "frozen_layers.json").write_text(json.dumps(list(range(frozen))))
        return FinalModel(model=model, weights=weights, encoderize=built.report.facts())


@releasing_locks
def toy(load, data, masking, train, config: ToyConfig) -> dict:
    """Train the top `config.top_layers` layers of `load.source` and save the encoder to --output-dir."""
    target = build_target(masking)
    return run_recipe(Toy(load=load, data=data, masking=masking, train=train, toy=config, target=target,
                          output_dir=Path(train.output_dir), phases=masked_phase(target, train.steps),
                          inputs=input_paths(load.input_path, data.data_files)))
'''


def test_a_toy_recipe_is_one_subpackage_and_one_cli_row(decoder_dir, tmp_path, monkeypatch, capsys):
    from hf_encoderize import cli
    from hf_encoderize.data.sources import DataConfig
    from hf_encoderize.model.loading import LoadConfig
    from hf_encoderize.objectives.masking import MaskingConfig
    from hf_encoderize.records.run_record import RunRecord
    from hf_encoderize.training.train_config import TrainConfig

    package = tmp_path / "packages" / "toy_recipe"  # the one new subpackage
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(TOY_RECIPE)
    monkeypatch.syspath_prepend(str(tmp_path / "packages"))
    import toy_recipe

    monkeypatch.setitem(cli.COMMANDS, "toy", cli.Command(  # the one CLI row
        "toy", "train the top layers only", toy_recipe.toy,
        (LoadConfig, DataConfig, MaskingConfig, TrainConfig, toy_recipe.ToyConfig), cli._print_summary))
    corpus = write_corpus(tmp_path / "docs.jsonl", 80, lambda i: 6 + i % 12)
    out = tmp_path / "toy-run"
    args = ["toy", str(decoder_dir), "--data-files", str(corpus), "--max-steps", "2", "--max-seq-length", "32",
            "--batch-size", "4", "--eval-documents", "8", "--no-progress", "--top-layers", "1",
            "--output-dir", str(out)]
    assert cli.main(args) == 0, capsys.readouterr().err
    record = RunRecord.from_json(out / "run_record.json")
    assert record.command == "toy" and record.steps == 2 and record.facts["top_layers"] == 1  # the recipe's field
    assert [value for key, value in record.identity.items() if key.endswith(".top_layers")] == [1]  # "same run?"
    base, trained = load_file(decoder_dir / "model.safetensors"), load_file(out / "encoder" / "model.safetensors")
    top = max(int(m.group(1)) for name in trained if (m := re.search(r"layers\.(\d+)\.", name)))
    same_shape = [name for name in trained if name in base and trained[name].shape == base[name].shape]  # not the
    changed = {name for name in same_shape if not (trained[name] == base[name]).all()}  # vocabulary (mask token added)
    assert changed and all(f"layers.{top}." in name for name in changed), sorted(changed)  # only the top layer trained

    assert cli.main(["card", str(out)]) == 0, capsys.readouterr().err
    card = (out / "encoder" / "README.md").read_text()
    assert "2 optimizer steps" in card and "| Objective | MLM, mask ratio 40%" in card

    # Its marker lists what it writes (the recipe's own file too), so --overwrite knows the folder as the toy's.
    marker = json.loads((out / ".hf-encoderize.json").read_text())
    assert marker["command"] == "toy" and "frozen_layers.json" in marker["entries"]
    assert cli.main([*args, "--overwrite"]) == 0, capsys.readouterr().err

    package_text = "".join(p.read_text() for p in Path(cli.__file__).parent.rglob("*.py"))
    assert '"toy"' not in package_text and "toy_recipe" not in package_text  # nothing else names it
