"""scripts/gpu_check.py: the real `--smoke` run on CPU (table, JSON, a failing row that does not stop the others, the
clean-env reload of each saved encoder), and the row runner's failure capture in-process."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_check.py"

# What --smoke gives on a machine without CUDA: only sdpa cpt, the single-GPU config (on CPU) and their reloads run.
EXPECTED = {
    "install wheels": "fail",  # an empty --wheels folder: this row fails, and every other row still runs
    "gpu tests": "skipped",
    "cpt sdpa": "pass",
    "cpt flex_attention": "skipped",
    "cpt flash_attention_2": "skipped",
    "accelerate single_gpu": "pass",
    "accelerate multi_gpu_ddp": "skipped",
    "accelerate fsdp": "skipped",
    "accelerate deepspeed_zero2": "skipped",
    "accelerate deepspeed_zero3": "skipped",
    "qlora": "skipped",
    "reload cpt sdpa": "pass",
    "reload accelerate single_gpu": "pass",
}


def load_gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses resolve the string annotations through it
    spec.loader.exec_module(module)
    return module


def parse_table(text: str) -> list[dict]:
    """The markdown table's rows as dicts; cells split on `|` that is not escaped."""
    lines = [line for line in text.splitlines() if line.startswith("|")]
    split = [[cell.strip().replace("\\|", "|") for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in lines]
    header, separator, *body = split
    assert header == ["row", "status", "wall s", "key figure", "reason"]
    assert all(set(cell) == {"-"} for cell in separator)
    assert all(len(cells) == len(header) for cells in body)
    return [dict(zip(header, cells, strict=True)) for cells in body]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    if _has_cuda():
        pytest.skip("the expected statuses are those of a machine without CUDA")
    out = tmp_path_factory.mktemp("gpu_check")
    empty_wheels = tmp_path_factory.mktemp("no_wheels")
    done = subprocess.run([sys.executable, str(SCRIPT), "--smoke", "--out", str(out), "--wheels", str(empty_wheels)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    return done, out


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def test_smoke_rows_statuses_and_exit_code(smoke):
    done, out = smoke
    report = json.loads((out / "gpu_check.json").read_text())
    statuses = {row["name"]: row["status"] for row in report["rows"]}
    assert statuses == EXPECTED, done.stderr[-3000:]
    assert done.returncode == 1 and report["exit_code"] == 1  # the failed wheels row
    rows = {row["name"]: row for row in report["rows"]}
    assert "no .whl files" in rows["install wheels"]["reason"]
    assert all(row["reason"] for row in report["rows"] if row["status"] != "pass")
    assert all(row["wall_s"] >= 0 and not row["reason"] for row in report["rows"] if row["status"] == "pass")
    assert rows["cpt sdpa"]["details"]["tokens_per_s"] > 0
    assert rows["accelerate single_gpu"]["details"]["steps"] == 6
    for name in ("reload cpt sdpa", "reload accelerate single_gpu"):
        details = rows[name]["details"]
        assert details["is_causal"] is False and details["later_token_changes_first"] is True
        assert details["hf_encoderize_importable"] is False
    assert not (out / "work").exists()  # models and runs are deleted without --keep-work
    assert (out / "logs" / "cpt_sdpa.log").is_file()


def test_smoke_table_matches_json(smoke):
    done, out = smoke
    report = json.loads((out / "gpu_check.json").read_text())
    for text in (done.stdout, (out / "gpu_check.md").read_text()):
        table = parse_table(text)
        assert [(r["row"], r["status"]) for r in table] == [(r["name"], r["status"]) for r in report["rows"]]
        assert [float(r["wall s"]) for r in table] == [r["wall_s"] for r in report["rows"]]
    assert report["summary"] in done.stdout


def test_run_row_catches_failures_and_skips(tmp_path):
    gpu_check = load_gpu_check()
    ctx = gpu_check.Context(tmp_path, smoke=True, timeout_s=60, deadline=float("inf"), baselines="")

    def broken(ctx):
        raise RuntimeError("boom | with a pipe")

    def skipped(ctx):
        raise gpu_check.Skip("needs CUDA")

    rows = [gpu_check.run_row("broken", broken, ctx), gpu_check.run_row("skipped", skipped, ctx),
            gpu_check.run_row("fine", lambda ctx: ("42 tok/s", {"x": 1}), ctx)]
    assert [(r.status, r.reason, r.figure) for r in rows] == [
        ("fail", "RuntimeError: boom | with a pipe", ""), ("skipped", "needs CUDA", ""), ("pass", "", "42 tok/s")]
    assert gpu_check.exit_code(rows) == 1 and gpu_check.exit_code(rows[1:]) == 0
    assert [r["reason"] for r in parse_table(gpu_check.render_table(rows))][0] == "RuntimeError: boom | with a pipe"


def test_run_logged_reports_the_error_line_and_the_timeout(tmp_path):
    gpu_check = load_gpu_check()
    ctx = gpu_check.Context(tmp_path, smoke=True, timeout_s=2, deadline=float("inf"), baselines="")
    ctx.logs.mkdir()
    with pytest.raises(gpu_check.CheckFailed, match=r"exit 2: error: bad flag \(log: "):
        gpu_check.run_logged(ctx, "bad", [sys.executable, "-c", "import sys; print('noise'); "
                                                                "sys.exit(print('error: bad flag') or 2)"])
    assert "noise" in (ctx.logs / "bad.log").read_text()
    with pytest.raises(gpu_check.CheckFailed, match="timed out after 2 s"):
        gpu_check.run_logged(ctx, "slow", [sys.executable, "-c", "import time; time.sleep(60)"])


LAUNCHER_FAILURE = ("[rank0]: Traceback (most recent call last):\n[rank0]: ValueError: micro batch is auto\n"
                    "subprocess.CalledProcessError: Command '[...]' returned non-zero exit status 1.\n")
PIP_FAILURE = "ERROR: No matching distribution found for fsspec<=2026.9.0"


@pytest.mark.parametrize("output, line", [
    ("noise\nerror: --max-seq-length 4096 is too long\n", "error: --max-seq-length 4096 is too long"),
    (LAUNCHER_FAILURE, "ValueError: micro batch is auto"),
    (f"Looking in links: /w\n{PIP_FAILURE}\n", PIP_FAILURE),
])
def test_error_line_names_the_cause_not_the_launcher(output, line):
    assert load_gpu_check().error_line(output) == line


def test_wheel_requirements_never_include_torch():
    requirements = load_gpu_check().runtime_requirements()
    assert not [r for r in requirements if r.startswith("torch")]
    names = {re.split(r"[<>=\[ ]", r)[0] for r in requirements}
    assert {"datasets", "gguf"} <= names and "seqeval" not in names  # entity F1 is ours (evaluation/entities.py)


def load_wheels_plan():
    spec = importlib.util.spec_from_file_location("gpu_wheels_plan", REPO / "scripts" / "gpu_wheels_plan.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_wheels_plan_doctests():
    import doctest

    results = doctest.testmod(load_wheels_plan())
    assert results.attempted >= 4 and results.failed == 0


def test_wheels_plan_carries_what_the_lent_machine_has_too_old():
    """Against the committed description of the lent GPU machine (transformers 5.17) and this pyproject's
    requirements (transformers >= 5.17 since the supported range replaced the 5.23 pin; peft >= 0.21 since gpu_check
    read the machine's peft 0.21.0 on an H200), the plan carries only what the machine lacks (gguf), and nothing it has
    at a good version: not transformers or peft. A requirement above the machine's version would carry it."""
    plan = load_wheels_plan()
    machine = plan.read_machine((REPO / "scripts" / "gpu_machine.txt").read_text().splitlines())
    assert machine["transformers"] == "5.17.0" and machine["torch"] == "2.11.0" and machine["peft"] == "0.21.0"
    report = {"install": [{"metadata": {"name": name, "version": version, "requires_dist": needs}}
                          for name, version, needs in [
                              ("transformers", "5.23.0", ["huggingface-hub>=1.3,<2", "tokenizers>=0.22,<=0.24"]),
                              ("accelerate", "1.15.0", ["torch>=2.0"]), ("huggingface-hub", "1.34.0", []),
                              ("tokenizers", "0.23.3", []), ("gguf", "0.19.0", []), ("torch", "2.11.0", []),
                              ("peft", "0.21.2", ["torch>=1.13"]),
                              ("nvidia-nccl-cu13", "2.28.9", [])]]}
    carry = plan.plan(report, machine, "3.12", load_gpu_check().runtime_requirements(), {"torch", "nvidia-nccl-cu13"})
    assert carry == ["gguf==0.19.0"]
    raised = [r.replace("peft>=0.21", "peft>=0.21.2") for r in load_gpu_check().runtime_requirements()]
    assert plan.plan(report, machine, "3.12", raised, {"torch", "nvidia-nccl-cu13"}) == ["gguf==0.19.0", "peft==0.21.2"]


def test_wheel_folder_install_takes_the_newest_runnable_wheel_of_each_package(tmp_path):
    gpu_check = load_gpu_check()
    for name in ("foo-1.0-py3-none-any.whl", "foo-2.0-py3-none-any.whl", "bar-1.0-cp27-cp27mu-manylinux1_x86_64.whl",
                 "baz_qux-0.3-py2.py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    assert [w.name for w in gpu_check.runnable_wheels(tmp_path)] == ["baz_qux-0.3-py2.py3-none-any.whl",
                                                                     "foo-2.0-py3-none-any.whl"]
    unmet = gpu_check.unmet_requirements(["torch>=2", "torch>=99", "no-such-package-here>=1"], sys.path)
    assert [u.split(" ")[0] for u in unmet] == ["torch>=99", "no-such-package-here>=1"]
    assert unmet[1].endswith("(have none)")
