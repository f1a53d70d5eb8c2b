"""Hints a pip user can follow (issue 67 point 7): the accelerate configs ship as package data, `hf-encoderize
accelerate-config NAME` gives an installed file's path (or a copy to edit), and every hint names a config the wheel has,
never `examples/accelerate/`, which no wheel holds."""

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import get_args

import pytest
import yaml

from hf_encoderize import cli
from hf_encoderize.common.launch import ACCELERATE_CONFIGS, AccelerateConfigName

ROOT = Path(__file__).resolve().parents[1]
# Where a user reads a hint: the package's own text (errors, help), the README, the docs, the examples and scripts.
READ = [*(ROOT / "hf_encoderize").rglob("*.py"), ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
        *(ROOT / "examples").rglob("*.md"), *(ROOT / "examples").rglob("*.sh"), *(ROOT / "scripts").glob("*.py")]


def test_each_name_prints_the_path_of_a_shipped_config(capsys, tmp_path):
    names = set(get_args(AccelerateConfigName))
    assert names == {path.stem for path in ACCELERATE_CONFIGS.glob("*.yaml")}  # no config unlisted, none missing
    for name in sorted(names):
        assert cli.main(["accelerate-config", name]) == 0
        path = Path(capsys.readouterr().out.strip())
        assert path.parent == ACCELERATE_CONFIGS and "distributed_type" in yaml.safe_load(path.read_text())
    assert cli.main(["accelerate-config", "fsdp", "--copy-to", str(tmp_path / "mine"), "--json"]) == 0
    copied = Path(json.loads(capsys.readouterr().out)["path"])
    assert copied == tmp_path / "mine" / "fsdp.yaml"
    assert copied.read_text() == (ACCELERATE_CONFIGS / "fsdp.yaml").read_text()
    assert cli.main(["accelerate-config", "fsdp", "--copy-to", str(tmp_path / "mine")]) == 2  # never replaced
    assert "exists" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["accelerate-config", "ddp"])  # argparse lists the names


def test_every_hint_names_a_config_the_package_has():
    shipped = set(get_args(AccelerateConfigName))
    named = {}
    for path in READ:
        text = path.read_text(errors="replace")
        assert "examples/accelerate" not in text, path  # not in a wheel
        for name in re.findall(r"accelerate-config ([a-z_0-9]+)", text):
            named.setdefault(name, path)
    assert named and not {name: str(path) for name, path in named.items() if name not in shipped}


def test_a_built_wheel_holds_the_configs_and_the_command_finds_them(installed_wheel, tmp_path):
    wheel, site = installed_wheel
    inside = {name for name in zipfile.ZipFile(wheel).namelist() if name.startswith("hf_encoderize/configs/")}
    assert inside == {f"hf_encoderize/configs/accelerate/{name}.yaml" for name in get_args(AccelerateConfigName)}
    probe = ("from hf_encoderize.common.launch import AccelerateConfig, accelerate_config; "
             "print(accelerate_config(AccelerateConfig('deepspeed_zero3'))['path'])")
    found = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={"PYTHONPATH": str(site),
                           "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)
    assert found.returncode == 0, found.stderr[-2000:]
    path = Path(found.stdout.strip())
    assert path.is_file() and path.is_relative_to(site / "hf_encoderize"), path
