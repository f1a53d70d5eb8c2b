"""Which wheels a GPU machine without a package index needs: `python3 scripts/gpu_wheels_plan.py REPORT MACHINE PY`.

REPORT is pip's `--report` of resolving hf-encoderize's requirements afresh for Python PY (`scripts/gpu_wheels.sh`
makes it); MACHINE lists what the GPU machine has, one `name==version` (or a bare name: present, version unknown) a
line, as `pip freeze` there prints it (`scripts/gpu_machine.txt` is the lent machine as last read). Prints one
`name==version` line per package to carry.

A package is carried when the machine lacks it, or has a version that some requirement in the resolution refuses:
the lent machine had peft 0.21.0 when hf-encoderize needed >= 0.21.2 (read there on 2026-11-26; the floor is 0.21.0
since), so a plan that only looked at names would carry nothing and the requirement check there would fail. A
package the machine has at a version every requirement accepts stays as it is (its own build, its own pins), and so
does one listed without a version. Never torch or anything
torch pulls (CUDA libraries, triton): `always_there` names them, and the machine's own CUDA build stays.
"""

from __future__ import annotations

import json
import re
import sys

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name as norm  # PEP 503: Sentence_Transformers -> sentence-transformers
from packaging.version import InvalidVersion, Version

UNKNOWN = ""  # a package the machine has, version not known


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


def requirements_on(report: dict, python_version: str, direct: list[str]) -> dict[str, list[Requirement]]:
    """Every requirement the resolution holds, by the name it constrains: `direct` ones and each resolved package's
    `requires_dist` whose marker holds on Linux x86_64 under `python_version` with no extra."""
    environment = {**default_environment(), "python_version": python_version,
                   "python_full_version": f"{python_version}.0", "sys_platform": "linux",
                   "platform_system": "Linux", "platform_machine": "x86_64", "implementation_name": "cpython",
                   "platform_python_implementation": "CPython", "extra": ""}
    found: dict[str, list[Requirement]] = {}
    texts = list(direct) + [text for item in report["install"] for text in item["metadata"].get("requires_dist", [])]
    for text in texts:
        requirement = Requirement(text)
        if requirement.marker is None or requirement.marker.evaluate(environment):
            found.setdefault(norm(requirement.name), []).append(requirement)
    return found


def accepts(requirements: list[Requirement], version: str) -> bool:
    try:
        parsed = Version(version)
    except InvalidVersion:
        return False
    return all(parsed in requirement.specifier for requirement in requirements)


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


def main(argv: list[str]) -> int:
    report_path, machine_path, python_version, direct_path, torch_report_path = argv
    report = json.load(open(report_path))
    machine = read_machine(open(machine_path).read().splitlines())
    direct = [line.strip() for line in open(direct_path) if line.strip()]
    torch_closure = {norm(item["metadata"]["name"]) for item in json.load(open(torch_report_path))["install"]}
    print("\n".join(plan(report, machine, python_version, direct, torch_closure)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
