"""Launch facts (world size, rank, main process) have one owner, `common/launch.py`, read from the launcher's
environment; every other module asks it (issue 28 step 1)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import hf_encoderize
from hf_encoderize.common import launch
from hf_encoderize.common.errors import EncoderizeError

LAUNCHES = {  # id: (environment, world size, rank, main process)
    "plain python": ({}, 1, 0, True),
    "torchrun, first of four": ({"WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "0"}, 4, 0, True),
    "torchrun, third of four": ({"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "2"}, 4, 2, False),
    "second node, local rank 0": ({"WORLD_SIZE": "16", "RANK": "8", "LOCAL_RANK": "0"}, 16, 8, False),
}


@pytest.mark.parametrize("case", list(LAUNCHES))
def test_launch_facts_come_from_the_launchers_environment(case):
    environ, size, rank, main = LAUNCHES[case]
    assert (launch.world_size(environ), launch.rank(environ), launch.is_main_process(environ)) == (size, rank, main)


def test_launch_facts_read_the_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "1")
    assert (launch.world_size(), launch.rank(), launch.is_main_process()) == (3, 1, False)


@pytest.mark.parametrize(("environ", "message"), [
    ({"WORLD_SIZE": "two"}, "WORLD_SIZE"), ({"WORLD_SIZE": "0"}, "WORLD_SIZE"), ({"RANK": "-1"}, "RANK"),
])
def test_a_broken_launch_environment_is_one_line(environ, message):
    with pytest.raises(EncoderizeError, match=message):
        launch.world_size(environ), launch.rank(environ)


_READ = re.compile(r"""environ(\.get\(|\[)\s*["'](WORLD_SIZE|RANK|LOCAL_RANK)["']""")


def test_no_other_module_reads_the_launch_variables():
    """One owner: a second reader of WORLD_SIZE or RANK is how the copies drifted (seven readers before)."""
    package = Path(hf_encoderize.__file__).parent
    readers = [str(path.relative_to(package)) for path in sorted(package.rglob("*.py"))
               if path.name != "launch.py" and _READ.search(path.read_text(encoding="utf-8"))]
    assert readers == []


END = ("import atexit, sys\n"
       "from hf_encoderize.common.launch import end_launched_process\n"
       "atexit.register(lambda: print('finalized', file=sys.stderr))\n"
       "print('saved', end='')\n"  # no newline: only an explicit flush gets it out before os._exit
       "end_launched_process(3)\n"
       "print(' returned', end='')\n")
END_ROWS = {"one of two processes": ({"WORLD_SIZE": "2", "RANK": "1"}, 3, "saved", ""),
            "a plain run": ({}, 0, "saved returned", "finalized\n")}


@pytest.mark.parametrize("environ, code, out, err", END_ROWS.values(), ids=END_ROWS.keys())
def test_a_launched_process_ends_without_finalization(environ, code, out, err):
    """Under a launcher, a process ends with its code and its output flushed, and without Python's finalization (the
    atexit handler never runs: gloo's threads can abort it); a plain run returns and exits as usual."""
    base = {key: value for key, value in os.environ.items() if key not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    done = subprocess.run([sys.executable, "-c", END], capture_output=True, text=True, env={**base, **environ},
                          timeout=120)
    assert (done.returncode, done.stdout) == (code, out), done.stderr
    assert done.stderr.endswith(err) and done.stderr.count("finalized") == (1 if err else 0), done.stderr


def test_the_command_ends_through_the_launch_exit():
    """`hf-encoderize` and `python -m hf_encoderize.cli` both go through `cli.entry`, which ends a launched process
    with `end_launched_process` (the console script must not point at `main`, which returns)."""
    import tomllib

    scripts = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["hf-encoderize"] == "hf_encoderize.cli:entry"
    base = {key: value for key, value in os.environ.items() if key not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    run_cli = ("import atexit, runpy, sys\n"
               "atexit.register(lambda: print('finalized', file=sys.stderr))\n"
               "sys.argv = ['hf-encoderize', 'card', '/no/such/run']\n"
               "runpy.run_module('hf_encoderize.cli', run_name='__main__')\n")
    for environ, finalized in (({"WORLD_SIZE": "2", "RANK": "1"}, False), ({}, True)):
        done = subprocess.run([sys.executable, "-c", run_cli], capture_output=True, text=True,
                              env={**base, "HF_HUB_OFFLINE": "1", **environ}, timeout=300)
        assert done.returncode == 2, done.stderr  # the error's code, through either exit
        assert ("finalized" in done.stderr) == finalized, done.stderr
