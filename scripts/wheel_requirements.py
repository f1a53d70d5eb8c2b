"""Which carried wheels this interpreter can install, and which runtime requirements an environment leaves unmet:
the pure half of `gpu_check.py`'s `--wheels` row (no Context, no row), imported by it and by the GPU session.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def runnable_wheels(folder: Path) -> list[Path]:
    """The wheels in `folder` this interpreter can install, one per package (its newest version): pip refuses a
    `--target` install that names two versions of one package."""
    from packaging.tags import sys_tags
    from packaging.utils import parse_wheel_filename

    supported, best = set(sys_tags()), {}
    for wheel in sorted(folder.glob("*.whl")):
        name, version, _, tags = parse_wheel_filename(wheel.name)
        if tags & supported and (name not in best or version > best[name][0]):
            best[name] = (version, wheel)
    return [wheel for _, wheel in sorted(best.values(), key=lambda pair: pair[1].name)]


def unmet_requirements(requirements: list[str], path: list[str]) -> list[str]:
    """The requirements that the first distribution of each name on `path` does not meet ('name (have X)')."""
    from importlib.metadata import distributions

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    found = {}
    for dist in distributions(path=path):
        if dist.metadata["Name"]:  # a half-removed install can leave a dist-info without metadata
            found.setdefault(canonicalize_name(dist.metadata["Name"]), dist.version)
    unmet = []
    for text in requirements:
        requirement = Requirement(text)
        have = found.get(canonicalize_name(requirement.name))
        if have is None or not requirement.specifier.contains(have, prereleases=True):
            unmet.append(f"{text} (have {have or 'none'})")
    return unmet


def runtime_requirements() -> list[str]:
    """pyproject's dependencies (torch excluded: the machine brings its own build) plus the gguf extra."""
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    requirements = project["dependencies"] + project["optional-dependencies"]["gguf"]
    return [r for r in requirements if not re.match(r"torch\b", r)]
