"""Which dependencies moved since the last green run: meet a new release on purpose, not by a red CI.

`constraints/last-green.txt` holds the version of every package the test environment had when the suite last passed
in full (written with `--record` after a green `bash scripts/test.sh`). This script compares it with either

- a fresh resolution of the newest releases (the default: `pip install --dry-run --ignore-installed --report` of
  `.[dev,gguf,space]`, the extras setup.sh installs; nothing is installed, a few minutes with PyPI reachable), or
- an environment as installed (`--installed PYTHON`: what scripts/test.sh prints before it tests, in seconds),

and names every package whose version moved, marking the project's direct dependencies (pyproject.toml), which are
the ones a new release of breaks us through (transformers 5.25 brought `kernels` and a recompile: issue 72).

    python scripts/dependency_drift.py                 # resolve the newest releases now; JSON on stdout
    python scripts/dependency_drift.py --installed .venv/bin/python
    python scripts/dependency_drift.py --installed .venv/bin/python --record   # after a green run

Exit status: 0 whether or not anything moved (it informs); 1 with `--strict` when a direct dependency moved; 2 when
the resolution itself fails.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "constraints" / "last-green.txt"
EXTRAS = ".[dev,gguf,space]"
_INSTALLED = ("import json, importlib.metadata as m; print(json.dumps({d.metadata['Name']: d.version "
              "for d in m.distributions() if d.metadata['Name']}))")


def canonical(name: str) -> str:
    """PEP 503's normal form: `Sentence_Transformers` and `sentence-transformers` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def direct_dependencies(pyproject: Path = ROOT / "pyproject.toml") -> set[str]:
    """The names pyproject.toml's `dependencies` and extras list (the packages we import and pin ranges for)."""
    import tomllib

    project = tomllib.loads(pyproject.read_text())["project"]
    specs = list(project["dependencies"]) + [s for extra in project["optional-dependencies"].values() for s in extra]
    return {canonical(re.split(r"[\s<>=!~;\[]", spec, maxsplit=1)[0]) for spec in specs}


def read_record(path: Path = RECORD) -> dict[str, str]:
    """`name==version` lines (comments skipped), by canonical name; none before the first `--record`."""
    pins = {}
    for line in (path.read_text() if path.exists() else "").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[canonical(name)] = version.strip()
    return pins


def resolved_newest(python: str) -> dict[str, str]:
    """What a fresh install would get today: pip's dry-run report of the project with setup.sh's extras."""
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        done = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--dry-run",
                               "--ignore-installed", "--report", str(report), "-e", EXTRAS],
                              cwd=ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"pip could not resolve {EXTRAS}: {done.stderr.strip().splitlines()[-1:]}")
        items = json.loads(report.read_text())["install"]
    return {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


def installed(python: str) -> dict[str, str]:
    """The versions an environment has now."""
    done = subprocess.run([python, "-c", _INSTALLED], capture_output=True, text=True, check=True)
    return {canonical(name): version for name, version in json.loads(done.stdout).items()}


def drift(green: dict[str, str], now: dict[str, str], direct: set[str]) -> dict:
    """What moved between the last green run and now: moved (old, new), added, gone, and which moved are direct.

    >>> d = drift({"transformers": "5.24.0", "tqdm": "4.67.1"}, {"transformers": "5.25.0", "kernels": "0.19.1"},
    ...           {"transformers"})
    >>> d["moved"], d["added"], d["gone"], d["direct_moved"]
    ({'transformers': ['5.24.0', '5.25.0']}, {'kernels': '0.19.1'}, ['tqdm'], ['transformers'])
    """
    skip = {"hf-encoderize"}
    moved = {n: [green[n], v] for n, v in sorted(now.items()) if n in green and green[n] != v and n not in skip}
    return {"moved": moved,
            "added": {n: v for n, v in sorted(now.items()) if n not in green and n not in skip},
            "gone": sorted(n for n in green if n not in now and n not in skip),
            "direct_moved": sorted(n for n in moved if n in direct)}


def summary_lines(result: dict) -> list[str]:
    if not (result["moved"] or result["added"] or result["gone"]):
        return ["dependency drift: nothing moved since the last green run (constraints/last-green.txt)"]
    lines = [f"dependency drift since the last green run (constraints/last-green.txt): {len(result['moved'])} moved, "
             f"{len(result['added'])} new, {len(result['gone'])} gone"]
    for name, (old, new) in result["moved"].items():
        lines.append(f"  {name} {old} -> {new}{'  (a direct dependency)' if name in result['direct_moved'] else ''}")
    lines += [f"  {name} {version} (new)" for name, version in result["added"].items()]
    lines += [f"  {name} (gone)" for name in result["gone"]]
    return lines


def write_record(versions: dict[str, str], source: str, path: Path = RECORD) -> None:
    header = ("# Every package of the test environment when `bash scripts/test.sh` last passed in full, written by\n"
              f"# `python scripts/dependency_drift.py --record` from {source}. scripts/dependency_drift.py names\n"
              "# what moved since.\n")
    body = "".join(f"{n}=={v}\n" for n, v in sorted(versions.items()) if n != "hf-encoderize")
    path.write_text(header + body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--installed", metavar="PYTHON", help="compare this environment as installed, not a fresh "
                        "resolution of the newest releases")
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose pip resolves (default: this)")
    parser.add_argument("--record", action="store_true", help="write what was read as the new last green run")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a direct dependency moved")
    parser.add_argument("--against", type=Path, default=RECORD,
                        help="the last green run's record (default: constraints/last-green.txt)")
    args = parser.parse_args(argv)
    try:
        now = installed(args.installed) if args.installed else resolved_newest(args.python)
    except (RuntimeError, subprocess.CalledProcessError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    result = drift(read_record(args.against), now, direct_dependencies())
    print("\n".join(summary_lines(result)), file=sys.stderr)
    print(json.dumps(result, indent=1))
    if args.record:
        write_record(now, f"`--installed {args.installed}`" if args.installed else "a fresh resolution", args.against)
    return 1 if args.strict and result["direct_moved"] else 0


if __name__ == "__main__":
    sys.exit(main())
