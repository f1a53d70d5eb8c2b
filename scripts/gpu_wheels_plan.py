"""Which wheels a GPU machine without a package index needs, planned so that nothing the machine keeps breaks.

`scripts/gpu_wheels.sh` calls it in three steps (each prints to stdout):

    python3 scripts/gpu_wheels_plan.py pins MACHINE DIRECT             # constraints: the image's versions we accept
    python3 scripts/gpu_wheels_plan.py plan REPORT MACHINE PY DIRECT TORCH_REPORT IMAGE   # name==version to carry
    python3 scripts/gpu_wheels_plan.py record MACHINE OUT.json [PY]    # IMAGE: Requires-Dist of the image's packages

MACHINE lists what the GPU machine has, one `name==version` (or a bare name: present, version unknown) a line, as
`pip freeze` there prints it (`scripts/gpu_machine.txt` is the lent machine as last read). DIRECT is hf-encoderize's
requirement lines; REPORT is pip's `--report` of resolving them for Python PY, constrained by `pins` (so the
resolution keeps the image's transformers 5.17 and the huggingface_hub 1.33 that it requires, rather than the newest
of each); IMAGE is what `record` wrote (`scripts/gpu_image_requires.json`: the lent machine's, recorded from PyPI).

A package is carried when the machine lacks it, or has a version that some requirement in the resolution refuses:
the lent machine had peft 0.21.0 when hf-encoderize needed >= 0.21.2 (read there on 2026-11-26; the floor is 0.21.0
since), so a plan that only looked at names would carry nothing and the requirement check there would fail. A
package the machine has at a version every requirement accepts stays as it is (its own build, its own pins), and so
does one listed without a version. Never torch or anything torch pulls (CUDA libraries, triton): `always_there` names
them, and the machine's own CUDA build stays.

Why the image's own requirements are read too (issue 65): resolving only ours once carried huggingface_hub 2.4.0
beside the image's transformers 5.17.0, which refuses hub >= 2.0 at import, so the session died at its first import
with no row. `broken_imports` checks every package the machine keeps (with a known version) against what the plan
carries, and `plan` exits 3 without printing a plan when one would break: gpu_wheels.sh then writes no folder.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as norm  # PEP 503: Sentence_Transformers -> sentence-transformers
from packaging.version import InvalidVersion, Version

UNKNOWN = ""  # a package the machine has, version not known
REFUSED = 3  # `plan`'s exit code when the carried set would break a package the machine keeps
# pip matches a manylinux tag exactly: name every glibc a wheel may be built for (as scripts/gpu_wheels.sh does)
PLATFORMS = [arg for tag in [f"manylinux_2_{glibc}_x86_64" for glibc in range(39, 4, -1)]
             + ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"] for arg in ("--platform", tag)]


def read_machine(lines: list[str]) -> dict[str, str]:
    """Name -> version (UNKNOWN when not given) from `pip freeze` lines; a local build's `+cu130` is dropped.

    >>> read_machine(["torch==2.11.0+cu130", "peft", "foo @ file:///x", "# comment", ""])
    {'torch': '2.11.0', 'peft': '', 'foo': ''}
    """
    machine = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        pinned = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^+\s]+)(\+\S+)?", line)
        if pinned:
            machine[norm(pinned.group(1))] = pinned.group(2)
        else:
            machine[norm(re.split(r"[\s=@<>!~;\[]", line, maxsplit=1)[0])] = UNKNOWN
    return machine


def environment(python_version: str) -> dict[str, str]:
    """The marker environment of the GPU machine: Linux x86_64, CPython `python_version`, no extra."""
    return {**default_environment(), "python_version": python_version, "python_full_version": f"{python_version}.0",
            "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
            "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}


def applicable(texts: list[str], python_version: str) -> list[Requirement]:
    """The requirements among `texts` whose marker holds on the GPU machine with no extra."""
    env = environment(python_version)
    found = [Requirement(text) for text in texts]
    return [r for r in found if r.marker is None or r.marker.evaluate(env)]


def requirements_on(report: dict, python_version: str, direct: list[str]) -> dict[str, list[Requirement]]:
    """Every requirement the resolution holds, by the name it constrains: `direct` ones and each resolved package's
    `requires_dist` whose marker holds on Linux x86_64 under `python_version` with no extra."""
    texts = list(direct) + [text for item in report["install"] for text in item["metadata"].get("requires_dist", [])]
    found: dict[str, list[Requirement]] = {}
    for requirement in applicable(texts, python_version):
        found.setdefault(norm(requirement.name), []).append(requirement)
    return found


def accepts(requirements: list[Requirement], version: str) -> bool:
    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    return all(parsed in requirement.specifier for requirement in requirements)


def pins(machine: dict[str, str], direct: list[str]) -> list[str]:
    """Constraints for the resolution: each version the machine has that our direct requirements accept, so pip
    keeps it (and picks what it needs) rather than the newest release. A version ours refuses is left free: it travels.

    >>> pins({"transformers": "5.17.0", "peft": "0.21.0", "numpy": UNKNOWN}, ["transformers>=5.17,<6", "peft>=0.22"])
    ['transformers==5.17.0']
    """
    wanted = requirements_on({"install": []}, "3.12", direct)
    return [f"{name}=={version}" for name, version in machine.items()
            if version != UNKNOWN and accepts(wanted.get(name, []), version)]


def plan(report: dict, machine: dict[str, str], python_version: str, direct: list[str],
         always_there: set[str]) -> list[str]:
    """`name==version` of each resolved package the machine needs (see the module docstring).

    >>> report = {"install": [
    ...     {"metadata": {"name": "transformers", "version": "5.23.0", "requires_dist": ["tokenizers>=0.22"]}},
    ...     {"metadata": {"name": "tokenizers", "version": "0.23.3"}},
    ...     {"metadata": {"name": "gguf", "version": "0.17.1"}},
    ...     {"metadata": {"name": "peft", "version": "0.21.2"}},
    ...     {"metadata": {"name": "nvidia-nccl-cu13", "version": "2.28.9"}}]}
    >>> machine = {"transformers": "5.17.0", "tokenizers": "0.23.2", "peft": UNKNOWN}
    >>> plan(report, machine, "3.12", ["transformers>=5.23,<5.24", "gguf>=0.10", "peft>=0.15"], {"nvidia-nccl-cu13"})
    ['transformers==5.23.0', 'gguf==0.17.1']
    """
    wanted = requirements_on(report, python_version, direct)
    carry = []
    for item in report["install"]:
        name, version = item["metadata"]["name"], item["metadata"]["version"]
        key = norm(name)
        if key in always_there:
            continue
        have = machine.get(key)
        if have == UNKNOWN or (have is not None and accepts(wanted.get(key, []), have)):
            continue
        carry.append(f"{name}=={version}")
    return carry


def broken_imports(carry: list[str], machine: dict[str, str], image: dict, python_version: str) -> list[str]:
    """What the carried packages would break among those the machine keeps: each kept package of known version
    (`image["packages"]`: its Requires-Dist, from `record`) whose requirement on a carried package refuses the
    carried version. An empty list: the folder is safe to put first on the machine's path.

    >>> image = {"packages": {"transformers": {"version": "5.17.0",
    ...                                        "requires_dist": ["huggingface-hub<2.0,>=1.5.0"]}}}
    >>> broken_imports(["huggingface_hub==2.4.0"], {"transformers": "5.17.0"}, image, "3.12")
    ['transformers 5.17.0 requires huggingface-hub<2.0,>=1.5.0, but the folder carries huggingface_hub 2.4.0']
    >>> broken_imports(["transformers==5.25.0", "huggingface_hub==2.4.0"], {"transformers": "5.17.0"}, image, "3.12")
    []
    """
    carried = dict(line.split("==", 1) for line in carry)
    by_key = {norm(name): (name, version) for name, version in carried.items()}
    broken = []
    for key, facts in image.get("packages", {}).items():
        if norm(key) in by_key or machine.get(norm(key)) != facts["version"]:
            continue  # carried itself (its new version's requirements are the resolution's), or not this image's
        for requirement in applicable(facts.get("requires_dist", []), python_version):
            name, version = by_key.get(norm(requirement.name), (None, None))
            if name is not None and not accepts([requirement], version):
                broken.append(f"{key} {facts['version']} requires {requirement}, but the folder carries {name} "
                              f"{version}")
    return broken


def record(machine: dict[str, str], python_version: str) -> dict:
    """The Requires-Dist of every package the machine has at a known version, as PyPI's wheel for Linux x86_64 and
    `python_version` declares it (pip's `--report` of a metadata-only dry run; one package at a time where a batch
    fails, and a package with no such wheel is left out, its name listed)."""
    pinned = [f"{name}=={version}" for name, version in sorted(machine.items()) if version != UNKNOWN]
    found, missing = _dry_run(pinned, python_version), []
    if found is None:
        found = {}
        for pin in pinned:
            one = _dry_run([pin], python_version)
            found.update(one or {})
            missing += [] if one else [pin]
    return {"python": python_version, "packages": found, "not_found": missing}


def _dry_run(pinned: list[str], python_version: str) -> dict | None:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--no-deps",
                               "--ignore-installed", "--ignore-requires-python",  # metadata only: any interpreter
                               "--target", f"{tmp}/t", "--report", str(report),
                               "--only-binary=:all:", "--implementation", "cp", "--python-version", python_version,
                               *PLATFORMS, *pinned], capture_output=True, text=True)
        if done.returncode != 0:
            return None
        items = json.loads(report.read_text())["install"]
    return {norm(item["metadata"]["name"]): {"version": item["metadata"]["version"], "requires_dist": [
        text for text in item["metadata"].get("requires_dist", []) if "extra ==" not in text]} for item in items}


def _lines(path: str) -> list[str]:
    return [line.strip() for line in open(path) if line.strip()]


def main(argv: list[str]) -> int:
    command, *args = argv
    if command == "pins":
        machine_path, direct_path = args
        print("\n".join(pins(read_machine(_lines(machine_path)), _lines(direct_path))))
        return 0
    if command == "record":
        machine_path, out, *python = args
        recorded = record(read_machine(_lines(machine_path)), python[0] if python else "3.12")
        Path(out).write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        return 0
    report_path, machine_path, python_version, direct_path, torch_report_path, image_path = args
    report = json.load(open(report_path))
    machine = read_machine(_lines(machine_path))
    torch_closure = {norm(item["metadata"]["name"]) for item in json.load(open(torch_report_path))["install"]}
    carry = plan(report, machine, python_version, _lines(direct_path), torch_closure)
    broken = broken_imports(carry, machine, json.load(open(image_path)), python_version)
    if broken:
        print(f"gpu_wheels_plan: refused for Python {python_version}: carrying {len(carry)} packages would break "
              f"what the machine keeps: " + "; ".join(broken), file=sys.stderr)
        return REFUSED
    print("\n".join(carry))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
