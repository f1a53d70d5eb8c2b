"""docs/commands.md is generated from the CLI's config dataclasses (scripts/command_reference.py) and must equal what
the script writes now, so an option's reference cannot drift from its field: a renamed flag, a changed default or an
edited field docstring fails here until the page is regenerated."""

import dataclasses
import importlib.util
import subprocess
import sys
from pathlib import Path

from hf_encoderize.cli import COMMANDS
from hf_encoderize.common.options import option_name

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "command_reference.py"


def _script():
    spec = importlib.util.spec_from_file_location("command_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_committed_command_reference_is_what_the_script_writes_now():
    page = REPO / "docs" / "commands.md"
    stale = "docs/commands.md is stale: run `python scripts/command_reference.py`"
    assert page.read_text() == _script().render(), stale


def test_the_reference_names_every_command_and_every_option_with_its_default_and_docstring():
    from hf_encoderize.common import stages
    from hf_encoderize.common.arguments import field_docs

    text = _script().render()
    for name, command in COMMANDS.items():
        section = text.split(f"## `{name}`\n", 1)[1].split("\n## ", 1)[0]
        for cls in command.configs:
            docs = field_docs(cls)
            for field in dataclasses.fields(cls):
                if stages.stage_of(field):  # `run`'s stages: each option of the stage's class, prefixed
                    inner = field_docs(stages.stage_class(cls, field))
                    for sub in stages.stage_fields(cls, field):
                        (line,) = [line for line in section.splitlines()
                                   if line.startswith(f"- `--{stages.key(cls, field, sub).replace('_', '-')}` (")]
                        assert stages.prefixed_text(inner.get(sub.name, "undocumented"), cls, field) in line
                    continue
                name_of = option_name(cls, field)  # the public name, `--learning-rate` for the field `lr`
                flag = f"--{name_of.replace('_', '-')}" if field.kw_only else name_of.upper()
                starts = (f"- `{flag}` (", f"- `{flag}` / `")  # `--max-steps` / `--steps`: its short spelling
                (line,) = [line for line in section.splitlines() if line.startswith(starts)]
                assert docs.get(field.name, "undocumented") in line
                if field.kw_only and field.default is not dataclasses.MISSING:
                    assert f"default `{field.default!r}`" in line


def test_the_check_mode_fails_on_a_stale_page(tmp_path, monkeypatch):
    module = _script()
    monkeypatch.setattr(module, "PAGE", tmp_path / "commands.md")
    assert module.main(["--check"]) == 1  # no page yet
    assert module.main([]) == 0 and module.main(["--check"]) == 0
    module.PAGE.write_text(module.PAGE.read_text() + "hand-edited\n")
    assert module.main(["--check"]) == 1


def test_the_script_runs_from_the_command_line():
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr
