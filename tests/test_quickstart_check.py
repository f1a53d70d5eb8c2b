"""scripts/quickstart_check.py, the digit-for-digit check of a quickstart run against the README's quoted block: it
passes on what the README quotes, fails on one changed digit, and reads the run's own folder as runs/."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "quickstart_check.py"
spec = importlib.util.spec_from_file_location("quickstart_check", SCRIPT)
quickstart_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(quickstart_check)


def _printed(folder: str) -> str:
    """What a run in `folder` would print, rebuilt from the README's quote (the progress lines around it)."""
    lines = quickstart_check.quoted_lines((REPO / "README.md").read_text())
    return "progress ...\n" + "\n".join(line.replace("runs/", folder + "/") for line in lines) + "\ndone\n"


def test_the_readme_quotes_the_table_the_losses_and_the_paraphrases():
    lines = quickstart_check.quoted_lines((REPO / "README.md").read_text())
    assert len(lines) >= 15
    assert any(line.startswith("held-out MLM loss") for line in lines)
    assert any(line.startswith("| ir | syn-retrieval |") for line in lines)


def test_a_run_printing_the_quote_passes_and_one_changed_digit_fails(tmp_path):
    readme = (REPO / "README.md").read_text()
    printed = _printed("/scratch/qs")
    quoted = len(quickstart_check.quoted_lines(readme))
    assert quickstart_check.check(readme, printed, "/scratch/qs") == {"quoted": quoted, "found": quoted, "missing": []}
    assert quickstart_check.check(readme, printed)["missing"]  # the folder not read as runs/: the corpus line differs
    changed = printed.replace("encoder 6.096", "encoder 6.097")
    assert quickstart_check.check(readme, changed, "/scratch/qs")["missing"] == [
        "held-out MLM loss (same rows and masks, lower is better): base 8.531 -> encoder 6.096"]
    (tmp_path / "out.txt").write_text(changed)
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "out.txt"), "--runs", "/scratch/qs"],
                            capture_output=True, text=True)
    assert result.returncode == 1 and f'"found": {quoted - 1}' in result.stdout


def test_a_readme_without_the_block_is_one_error_line():
    with pytest.raises(SystemExit, match="error: the README has no quickstart block"):
        quickstart_check.quoted_lines("# a README\n")
