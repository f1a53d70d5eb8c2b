"""The package's layout is what its map says: the layers hold (import-linter), the package docstring lists every
module of every subpackage, no module outgrows the style guide, and the old import paths the README showed still work
with a deprecation warning."""

import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import hf_encoderize

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hf_encoderize"
ALIASES = {"cpt": "cpt", "loading": "LoadConfig", "lora": "AdapterConfig", "masking": "MaskingConfig",
           "train": "TrainConfig"}


def _tree() -> dict[str, set[str]]:
    """subpackage -> its modules, read from the files."""
    return {pkg.name: {p.stem for p in pkg.glob("*.py") if p.stem != "__init__"}
            for pkg in PACKAGE.iterdir() if (pkg / "__init__.py").is_file()}


def _documented() -> dict[str, set[str]]:
    """subpackage -> the modules the package docstring names for it (`- `name/`: ...: `a`, `b`;` entries)."""
    entries = re.split(r"\n- ", hf_encoderize.__doc__)[1:]
    mapping = {}
    for entry in entries:
        head = re.match(r"`(\w+)/`", entry)
        if head:
            listed = entry.split(":", 1)[1] if ":" in entry else ""
            mapping[head.group(1)] = {m for m in re.findall(r"`(\w+)`", listed)}
    return mapping


def test_the_package_docstring_maps_every_module_of_every_subpackage():
    tree, documented = _tree(), _documented()
    assert set(documented) == set(tree), f"subpackages: docstring {sorted(documented)} != tree {sorted(tree)}"
    for name, modules in tree.items():
        assert documented[name] == modules, f"{name}/: docstring lists {sorted(documented[name])}, tree has " \
                                            f"{sorted(modules)}"


def test_each_subpackage_opens_with_a_docstring():
    for name in _tree():
        module = __import__(f"hf_encoderize.{name}", fromlist=["_"])
        assert (module.__doc__ or "").strip(), f"hf_encoderize/{name}/__init__.py has no docstring"


@pytest.mark.skipif(shutil.which("lint-imports") is None, reason="import-linter is in the dev extra")
def test_stages_import_downward_only_and_without_circles():
    result = subprocess.run(["lint-imports"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "2 kept, 0 broken" in result.stdout


def test_no_python_file_of_the_package_is_over_500_lines():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert not {path: n for path, n in sizes.items() if n > 500}


@pytest.mark.parametrize("old", sorted(ALIASES))
def test_old_entry_points_still_import_with_a_deprecation_warning(old):
    sys.modules.pop(f"hf_encoderize.{old}", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = __import__(f"hf_encoderize.{old}", fromlist=[ALIASES[old]])
    assert getattr(module, ALIASES[old]) is not None
    assert any(issubclass(w.category, DeprecationWarning) and "moved to" in str(w.message) for w in caught)


def test_the_old_data_module_path_still_gives_data_config():
    from hf_encoderize.data.sources import DataConfig

    with pytest.warns(DeprecationWarning, match="hf_encoderize.data.sources"):
        from hf_encoderize.data import DataConfig as old
    assert old is DataConfig
