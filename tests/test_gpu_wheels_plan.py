"""scripts/gpu_wheels_plan.py against the GPU image's recorded freeze (scripts/gpu_machine.txt) and the Requires-Dist
of what it keeps (scripts/gpu_image_requires.json): the plan must never carry a package that breaks one the image
keeps (issue 65: huggingface_hub 2.x carried beside the image's transformers 5.17 killed the session at import)."""

import importlib.util
import json
import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = REPO / "scripts"


def load_plan():
    spec = importlib.util.spec_from_file_location("gpu_wheels_plan_t", SCRIPTS / "gpu_wheels_plan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def ours() -> list[str]:
    """The direct requirements gpu_wheels.sh resolves: the runtime, the gguf and kernels extras."""
    import tomllib  # Python 3.11+: the test environments'
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    return project["dependencies"] + extras["gguf"] + extras["kernels"]


def resolved(*packages: tuple[str, str, list[str]]) -> dict:
    """A pip `--report` holding these (name, version, requires_dist)."""
    return {"install": [{"metadata": {"name": name, "version": version, "requires_dist": needs}}
                        for name, version, needs in packages]}


# What pip resolved for ours on 2026-12-07 without the image's versions (Python 3.12, torch pinned to 2.11.0), cut to
# the packages that matter here: the newest transformers requires huggingface_hub >= 2.4, so the image's hub 1.33
# is refused and travels, while the image's transformers 5.17 (within ours) stays.
UNCONSTRAINED = resolved(
    ("transformers", "5.25.0", ["huggingface-hub<3.0,>=2.4.0", "tokenizers<=0.24.0,>=0.22.0", "kernels<0.20,>=0.19.1"]),
    ("huggingface_hub", "2.5.0", []), ("kernels", "0.19.1", ["huggingface-hub>=1.32.0"]),
    ("datasets", "5.2.0", ["huggingface-hub<3.0,>=1.31.0"]), ("accelerate", "1.16.0", ["huggingface_hub>=0.21.0"]),
    ("sentence-transformers", "6.3.0", ["huggingface-hub<3.0.0,>=1.3.0", "transformers<6.0.0,>=4.41.0"]),
    ("peft", "0.22.0", ["huggingface_hub>=0.25.0"]), ("tokenizers", "0.23.3", ["huggingface-hub>=0.16.4,<3.0"]),
    ("gguf", "0.19.0", []), ("torch", "2.11.0", []))
# The same resolution constrained by `pins` (the image's versions that ours accept), as gpu_wheels.sh ran it on
# 2026-12-07: pip keeps them, and takes a datasets that accepts hub 1.33.
CONSTRAINED = resolved(
    ("transformers", "5.17.0", ["huggingface-hub<2.0,>=1.5.0", "tokenizers<0.24.0,>=0.23.1"]),
    ("huggingface_hub", "1.33.0", []), ("datasets", "5.2.0", ["huggingface-hub<3.0,>=1.31.0"]),
    ("accelerate", "1.15.0", ["huggingface_hub>=0.21.0"]),
    ("sentence-transformers", "6.0.1", ["huggingface-hub<3.0.0,>=1.3.0", "transformers<6.0.0,>=4.41.0"]),
    ("peft", "0.21.0", ["huggingface_hub>=0.25.0"]), ("tokenizers", "0.23.2", ["huggingface-hub>=0.16.4,<3.0"]),
    ("gguf", "0.19.0", []), ("torch", "2.11.0", []))


def machine_and_image(plan):
    machine = plan.read_machine((SCRIPTS / "gpu_machine.txt").read_text().splitlines())
    return machine, json.loads((SCRIPTS / "gpu_image_requires.json").read_text())


def test_the_plan_refuses_hub_2_beside_the_images_transformers(tmp_path, capsys):
    """Today's unconstrained resolution, planned against the recorded image: hub 2.5 would travel while the image's
    transformers 5.17 (which requires hub < 2) stays, so `plan` exits REFUSED, prints no plan, and names both."""
    plan = load_plan()
    machine, image = machine_and_image(plan)
    carry = plan.plan(UNCONSTRAINED, machine, "3.12", ours(), {"torch"})
    assert "huggingface_hub==2.5.0" in carry and not [c for c in carry if c.startswith("transformers==")]
    broken = plan.broken_imports(carry, machine, image, "3.12")
    assert any(line.startswith("transformers 5.17.0 requires huggingface-hub<2.0,>=1.5.0") for line in broken), broken
    for name, content in (("report.json", json.dumps(UNCONSTRAINED)), ("torch.json", json.dumps(resolved())),
                          ("direct.txt", "\n".join(ours()))):
        (tmp_path / name).write_text(content)
    code = plan.main(["plan", str(tmp_path / "report.json"), str(SCRIPTS / "gpu_machine.txt"), "3.12",
                      str(tmp_path / "direct.txt"), str(tmp_path / "torch.json"),
                      str(SCRIPTS / "gpu_image_requires.json")])
    out = capsys.readouterr()
    assert code == plan.REFUSED and out.out == "" and "huggingface_hub 2.5.0" in out.err


def test_the_images_versions_constrain_the_resolution_and_nothing_it_keeps_breaks():
    """`pins` hands pip the image's versions that ours accept (transformers 5.17.0 and the hub 1.33.0 it needs among
    them); the resolution they give carries only what the image lacks, and breaks nothing it keeps."""
    plan = load_plan()
    machine, image = machine_and_image(plan)
    pinned = plan.pins(machine, ours())
    for pin in ("transformers==5.17.0", "huggingface-hub==1.33.0", "accelerate==1.15.0", "peft==0.21.0",
                "sentence-transformers==6.0.1", "tokenizers==0.23.2", "torch==2.11.0"):
        assert pin in pinned
    carry = plan.plan(CONSTRAINED, machine, "3.12", ours(), {"torch"})
    assert carry == ["datasets==5.2.0", "gguf==0.19.0"]
    assert plan.broken_imports(carry, machine, image, "3.12") == []


def test_the_recorded_requirements_match_the_recorded_freeze():
    """Every package gpu_machine.txt pins has its Requires-Dist recorded at that version (`gpu_wheels_plan.py record
    scripts/gpu_machine.txt scripts/gpu_image_requires.json`, rerun when the machine file changes)."""
    plan = load_plan()
    machine, image = machine_and_image(plan)
    pinned = {name: version for name, version in machine.items() if version}
    recorded = {name: facts["version"] for name, facts in image["packages"].items()}
    missing = {re.split("==", pin)[0] for pin in image["not_found"]}
    assert {name: version for name, version in pinned.items() if name not in missing} == recorded
    assert image["python"] == "3.12" and len(recorded) >= 20
    assert "huggingface-hub<2.0,>=1.5.0" in image["packages"]["transformers"]["requires_dist"]


def test_wheels_plan_doctests():
    import doctest

    results = doctest.testmod(load_plan())
    assert results.attempted >= 8 and results.failed == 0



def test_the_rehearsal_installs_the_images_pinned_stack():
    """scripts/gpu_rehearse.sh builds its venv from gpu_machine.txt's pins for the image's stack: each package it
    names is pinned there (a bare line would leave its version to the package index: not the image's stack)."""
    script = (SCRIPTS / "gpu_rehearse.sh").read_text()
    stack = re.search(r"^stack=\(([^)]*)\)", script, flags=re.M).group(1).split()
    machine = load_plan().read_machine((SCRIPTS / "gpu_machine.txt").read_text().splitlines())
    assert {"torch", "transformers", "huggingface-hub", "accelerate", "peft", "triton"} <= set(stack)
    assert {name: machine.get(name) for name in stack if not machine.get(name)} == {}
    assert (machine["torch"], machine["transformers"], machine["huggingface-hub"]) == ("2.11.0", "5.17.0", "1.33.0")
