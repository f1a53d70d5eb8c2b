"""Launch facts (world size, rank, main process) have one owner, `common/launch.py`, read from the launcher's
environment; every other module asks it (issue 28 step 1)."""

import re
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
