"""scripts/gpu_session.py, rehearsed on the CPU with the smoke preset: inputs prepared beforehand, every arm in one
process, each part under its own limit, and results written as each part ends (a session cut short keeps them)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_session.py"


def _session(tmp_path: Path, *extra: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    inputs, out = tmp_path / "inputs", tmp_path / "out"
    prepared = subprocess.run([sys.executable, str(SCRIPT), "prepare", "--inputs", str(inputs), "--shapes", "smoke"],
                              capture_output=True, text=True, env=env, timeout=300)
    assert prepared.returncode == 0, prepared.stderr[-2000:]
    assert (inputs / "docs-smoke.jsonl.gz").is_file()
    done = subprocess.run([sys.executable, str(SCRIPT), "run", "--inputs", str(inputs), "--out", str(out), "--smoke",
                           *extra], capture_output=True, text=True, env=env, timeout=900)
    rows = [json.loads(line) for line in (out / "session.jsonl").read_text().splitlines()]
    return done, rows


def test_a_part_past_its_limit_is_a_row_and_the_session_goes_on(tmp_path):
    done, rows = _session(tmp_path, "--arm-limit-s", "0.5")
    assert done.returncode == 1, (done.returncode, done.stderr[-3000:])  # a row failed; the process did not crash
    by_part = {row["part"]: row for row in rows}
    assert by_part["imports"]["status"] == "pass"  # before any alarm: a limit never lands inside an import
    assert by_part["smoke stage"]["status"] == "pass"
    assert by_part["smoke default"]["status"] == "fail"
    assert "time limit" in by_part["smoke default"]["figure"]
    # every later part still ran (and was cut, or skipped for want of CUDA), and the table was written
    assert {"smoke sdpa", "smoke trainer_grouped", "smoke default", "smoke probe", "accelerate fsdp"} <= set(by_part)
    assert "smoke sdpa" in (tmp_path / "out" / "session.md").read_text()


@pytest.mark.slow
def test_the_smoke_session_times_every_arm_in_one_process(tmp_path):
    done, rows = _session(tmp_path, "--budget-s", "600")
    assert done.returncode == 0, done.stderr[-3000:]
    by_part = {row["part"]: row for row in rows}
    for part in ("smoke default", "smoke default_rows2x", "smoke tokens_per_step", "smoke sdpa",
                 "smoke trainer_grouped", "smoke trainer_grouped_tokens_per_step"):
        assert by_part[part]["status"] == "pass", by_part[part]
        assert by_part[part]["tokens_per_s"] > 0
    default = by_part["smoke default"]
    assert len(default["tokens_per_s_runs"]) == 2  # each timed arm twice
    assert default["attention_backend"] == "sdpa"  # what `auto` ran on the CPU, named in the row
    # the default arm compiles (as on a GPU) and its row says dynamo neither broke the graph nor hit its limit
    assert default["compiled"]["on"] and default["compiled"]["graph_breaks"] == 0
    assert default["compiled"]["recompile_limit_hits"] == 0
    assert default["dynamo"]["unique_graphs"] >= 1 and default["dynamo"]["recompile_limit_hits"] == 0  # the row's
    assert by_part["smoke trainer_grouped"]["attention_backend"] == "sdpa"  # the Trainer's rows name theirs too
    assert by_part["smoke trainer_grouped"]["figure"].startswith("attention sdpa")
    assert by_part["smoke sdpa"]["attention_backend"] == "sdpa" and not by_part["smoke sdpa"]["compiled"]["on"]
    assert by_part["smoke default_rows2x"]["figure"].startswith("rows 8 x accum 1")
    assert by_part["smoke tokens_per_step"]["grad_accum"] == 4  # 2048 tokens a step over 4 x 128-token rows
    assert by_part["smoke trainer_grouped_tokens_per_step"]["grad_accum"] == 4  # the Trainer given the same
    probe = by_part["smoke probe"]["loss_probe"]
    assert set(probe["seconds"]) == {"fused", "dense"} and not probe["failed"]  # the new candidate agrees with ours
    profile = by_part["smoke profile"]
    assert "tokens_per_s" not in profile and "mfu" not in profile  # a synchronised step's speed is not the run's
    assert profile["profile"]["total"] > 0 and profile["profile"]["attention_backward"] > 0
    assert 0 < len(profile["profile"]["top_kernels"]) <= 20
    assert (Path(profile["profile_folder"]) / "trace.json").is_file()  # kept after the run folder is deleted
    assert by_part["accelerate fsdp"]["status"] == "skipped"  # needs CUDA: said, not failed
    summary = json.loads((tmp_path / "out" / "session.json").read_text())
    assert summary["device"] == "cpu" and len(summary["rows"]) == len(rows)


def test_the_plan_runs_the_default_path_first_and_fsdp_last(tmp_path):
    """The GPU issue's order, most important first, on the GPU shapes (nothing is built: only the plan is read)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_session_plan", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_session_plan"] = module
    spec.loader.exec_module(module)
    session = module.Session(tmp_path, tmp_path, 0.0, False, True, "H200", [])
    names = [name for name, _, _ in module.plan(session, ("gpu-0.5b", "gpu-1b"),
                                                 {"stage": 90, "arm": 75, "launcher": 120})]
    assert names[:4] == ["gpu-1b stage", "gpu-0.5b stage", "gpu-1b default", "gpu-1b default_rows2x"]
    assert names.index("gpu-1b tokens_per_step") < names.index("gpu-0.5b default") < names.index("gpu-1b sdpa")
    assert names.index("gpu-1b trainer_grouped_tokens_per_step") < names.index("gpu-1b probe")
    assert names[-1] == "accelerate fsdp"
    limits = {name: limit for name, limit, _ in module.plan(session, ("gpu-0.5b", "gpu-1b"),
                                                             {"stage": 90, "arm": 75, "launcher": 120})}
    assert limits["gpu-1b default"] == 150  # run twice, so twice the time


def test_an_alarm_that_lands_while_a_failure_is_written_up_stays_that_parts_row(tmp_path):
    """The CI run of 896198a on a loaded machine lost two rows: a part failed just before its limit and the alarm
    fired while the failure was being written up, outside the part's own try, ending the session. The timer is now
    disarmed before the write-up."""
    import importlib.util
    import time

    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("gpu_session_alarm", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_session_alarm"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)

    class SlowToDescribe(Exception):
        def __str__(self):
            time.sleep(0.4)  # the write-up outlasts the part's 0.2 s limit
            return "slow to describe"

    def body():
        raise SlowToDescribe()

    session = module.Session(tmp_path, tmp_path, time.time() + 60, True, False, "cpu", [])
    module.run_part(session, "slow failure", 0.2, body)
    module.run_part(session, "next part", 5, lambda: ("ran", {}))
    assert [(row["part"], row["status"]) for row in session.rows] == [("slow failure", "fail"), ("next part", "pass")]
    assert session.rows[0]["figure"] == "SlowToDescribe: slow to describe"


def test_the_limit_waits_until_torch_is_out_of_the_way_then_raises():
    """A limit that lands in torch's machinery (here: a function compiled under torch/_dynamo's path, as dynamo's
    fake-tensor callbacks are) waits; it raises once control is back in other code. Raising inside such callbacks
    aborted the rehearsal with SIGABRT, and a half-started profiler with SIGSEGV, on a loaded machine (stop 63)."""
    import importlib.util
    import time

    spec = importlib.util.spec_from_file_location("part_limits_test", SCRIPT.parent / "part_limits.py")
    limits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(limits)
    torch_dir = limits.torch_folder()
    machinery = {}
    source = ("import time\ndef busy(seconds):\n    end = time.monotonic() + seconds\n"
              "    while time.monotonic() < end:\n        pass\n")
    exec(compile(source, torch_dir + "_dynamo/stand_in.py", "exec"), machinery)
    limit = limits.Limit(0.05)
    limit.arm()
    try:
        with pytest.raises(limits.PartTimeout, match="late, once out of torch's own code"):
            machinery["busy"](0.4)  # the alarm fires in here, and waits
            assert limit.deferred_s >= 0.3 - limits.RETRY_S
            time.sleep(5)  # our own code: it raises here
    finally:
        limit.disarm()
        limit.restore()
    assert 0.3 <= limit.deferred_s < 1.0
    assert not limits.in_torch_machinery(sys._getframe(), torch_dir)


def test_a_limit_that_waited_its_longest_raises_inside_torch_and_says_so(monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("part_limits_cap", SCRIPT.parent / "part_limits.py")
    limits = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(limits)
    monkeypatch.setattr(limits, "MAX_DEFER_S", 0.15)
    machinery = {}
    source = ("import time\ndef busy(seconds):\n    end = time.monotonic() + seconds\n"
              "    while time.monotonic() < end:\n        pass\n")
    exec(compile(source, limits.torch_folder() + "_dynamo/stand_in.py", "exec"), machinery)
    limit = limits.Limit(0.05)
    limit.arm()
    try:
        with pytest.raises(limits.PartTimeout, match="still inside torch after 0 s"):
            machinery["busy"](5)  # never leaves torch's machinery: the cap ends the wait
    finally:
        limit.disarm()
        limit.restore()
    assert 0.15 <= limit.deferred_s < 1.0


def _script(name: str, filename: str):
    """A script of scripts/ or benchmarks/ as a module under a test-only name (they are not packages)."""
    import importlib.util

    path = next(folder / filename for folder in (SCRIPT.parent, REPO / "benchmarks") if (folder / filename).is_file())
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_wheels_and_the_imports_are_rows_and_the_session_goes_on(tmp_path):
    """Issue 65: the wheel check and the preload ran outside any part, so a bad folder (or an import it broke) ended
    the session with a traceback and no rows. Each is a part now: a failure is its row, and the next part runs."""
    import time
    from functools import partial

    parts = _script("session_parts_rows", "session_parts.py")
    session = parts.Session(tmp_path, tmp_path, time.time() + 60, True, False, "cpu", [])
    empty = tmp_path / "no_wheels"
    empty.mkdir()
    parts.run_part(session, "install wheels", None, partial(parts.install_wheels, session, str(empty)))

    def broken_import():
        raise ImportError("huggingface-hub>=1.5.0,<2.0 is required, found huggingface-hub==2.4.0")

    parts.run_part(session, "imports", None, broken_import)
    parts.run_part(session, "next part", 5, lambda: ("ran", {}))
    assert [(row["part"], row["status"]) for row in session.rows] == [
        ("install wheels", "fail"), ("imports", "fail"), ("next part", "pass")]
    assert "no .whl files" in session.rows[0]["figure"] and "huggingface-hub" in session.rows[1]["figure"]
    assert "| install wheels | fail |" in (tmp_path / "session.md").read_text()


def _dist(folder: Path, name: str, version: str, requires: list[str]) -> None:
    info = folder / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {requirement}" for requirement in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def test_the_wheel_part_names_an_image_package_the_carried_wheels_break(tmp_path):
    """On the device, after installing: a package the image keeps whose requirement a carried wheel refuses (its
    transformers 5.17 and a carried huggingface_hub 2.4) is named before anything imports it."""
    parts = _script("session_parts_broken", "session_parts.py")
    site, image = tmp_path / "site", tmp_path / "image"
    _dist(site, "huggingface_hub", "2.4.0", [])
    _dist(site, "gguf", "0.19.0", [])
    _dist(image, "transformers", "5.17.0", ["huggingface-hub<2.0,>=1.5.0", "tokenizers<0.24", "rich; extra == 'x'"])
    _dist(image, "datasets", "5.2.0", ["huggingface-hub<3.0,>=1.31.0"])
    _dist(image, "huggingface_hub", "1.33.0", [])
    assert parts.broken_by(site, [str(image)]) == [
        "transformers 5.17.0 requires huggingface-hub<2.0,>=1.5.0, the wheels carry 2.4.0"]


def test_each_row_says_what_dynamo_compiled_during_it(tmp_path):
    """Issue 72: every row carries dynamo's unique graphs and recompile-limit hits over its part, and the table
    shows them, so a recompile (one that only shows with `kernels` installed, say) is visible in the session."""
    import time

    import torch

    parts = _script("session_parts_dynamo", "session_parts.py")
    session = parts.Session(tmp_path, tmp_path, time.time() + 120, True, False, "cpu", [])

    def recompiles():
        step = torch.compile(lambda x: x * 2 + 1, backend="eager", dynamic=False)
        for dtype in (torch.float32, torch.float64, torch.int64):  # a new dtype each call: past the limit of 1
            step(torch.ones(3, dtype=dtype))
        return "compiled", {}

    # dynamo's own patch: pytest's monkeypatch undoes a config value with delattr, which hides the option for every
    # later test of the process ("torch._dynamo.config.recompile_limit does not exist")
    with torch._dynamo.config.patch(recompile_limit=1):
        parts.run_part(session, "compiles", 60, recompiles)
    parts.run_part(session, "plain", 60, lambda: ("no compile", {}))
    compiled, plain = session.rows
    assert compiled["dynamo"]["unique_graphs"] >= 1 and compiled["dynamo"]["recompile_limit_hits"] >= 1
    assert plain["dynamo"] == {"unique_graphs": 0, "graph_breaks": 0, "recompile_limit_hits": 0}
    table = (tmp_path / "session.md").read_text()
    assert "| dynamo graphs |" in table and f"{compiled['dynamo']['unique_graphs']} (limit hits " in table


def test_the_trainer_baseline_names_its_attention_backend(tmp_path):
    """Issue 65: every timed row names what ran; the Trainer's rows name their model's attn_implementation as loaded
    (here eager, asked for, where the table used to fall back to the name asked for)."""
    bench = _script("cpt_throughput_trainer", "cpt_throughput.py")
    preset = {**bench.PRESETS["smoke"], "steps": 1, "warmup": 1}
    bench.ensure_inputs("smoke", tmp_path)
    result = bench.run_trainer(preset, tmp_path, grouped=True, attn_implementation="eager")
    assert result["attention_backend"] == "eager" and result["compiled"] == {"on": False}
