#!/usr/bin/env bash
# Print the Python that set-up installs into and the commands run with; make the project's `.venv` first if needed.
# A system Python is never installed into: on Debian 12+/Ubuntu 24.04 it refuses (PEP 668, "externally managed"), and
# elsewhere it would mix this project's pins into the system's packages. So:
#   - the interpreter (PYTHON, default python3) already runs inside a virtual environment (sys.prefix differs from
#     sys.base_prefix: an activated venv, or the floor environment scripts/test.sh puts first on PATH) -> that one;
#   - otherwise -> the project environment HF_ENCODERIZE_VENV (default .venv at the repository root), made from
#     PYTHON with `-m venv` when it does not exist yet.
# Only the chosen path goes to stdout; what was decided goes to stderr, so `py="$(bash scripts/venv_python.sh)"` works.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
base="${PYTHON:-python3}"
venv="${HF_ENCODERIZE_VENV:-$root/.venv}"
if ! command -v "$base" >/dev/null 2>&1; then
    echo "error: no $base on PATH; install Python 3.10 or later, or set PYTHON=/path/to/python3" >&2
    exit 2
fi
# The path printed is one that runs: a PYTHON that is no Python (/bin/true answers nothing and makes nothing) is refused
# here, not by the caller's exit 127 on a path that does not exist.
runs() { [ -x "$1" ] && "$1" -c 'import sys' >/dev/null 2>&1; }
in_venv="$("$base" -c 'import sys; print(sys.prefix != sys.base_prefix)' 2>/dev/null || true)"
if [ "$in_venv" != True ] && [ "$in_venv" != False ]; then
    echo "error: $base does not run as Python (it printed no answer to a one-line script); set PYTHON to a Python" \
        "3.10 or later" >&2
    exit 2
fi
if [ "$in_venv" = True ]; then
    py="$("$base" -c 'import sys; print(sys.executable)')"
    if ! runs "$py"; then
        echo "error: $base names its interpreter as '$py', which does not run; set PYTHON to the virtual" \
            "environment's bin/python" >&2
        exit 2
    fi
    echo "venv_python.sh: using $py (the active virtual environment)" >&2
    echo "$py"
    exit 0
fi
if [ ! -x "$venv/bin/python" ]; then
    # Only what this script made may go when `-m venv` fails: a folder that was there before (the user's, or a
    # half-made venv with its pyvenv.cfg) is kept, and a non-empty folder that is no venv is not written into at all.
    before=none
    if [ -e "$venv" ] || [ -L "$venv" ]; then
        before=empty
        if [ -n "$(ls -A "$venv" 2>/dev/null)" ]; then before=full; fi
        if [ "$before" = full ] && [ ! -e "$venv/pyvenv.cfg" ]; then
            echo "error: $venv exists and is not a virtual environment; set HF_ENCODERIZE_VENV to a new folder" \
                "(or to an existing virtual environment), or activate a virtual environment of your own" >&2
            exit 2
        fi
    fi
    echo "venv_python.sh: $("$base" -c 'import sys; print(sys.executable)') is not a virtual environment;" \
        "making the project environment $venv" >&2
    if ! "$base" -m venv "$venv" || ! runs "$venv/bin/python"; then
        case "$before" in
            none) rm -rf "$venv" ;;
            empty) find "$venv" -mindepth 1 -delete ;;  # the folder was the user's, what is in it now is ours
        esac
        echo "error: $base could not make a virtual environment at $venv; on Debian/Ubuntu install the" \
            "python3-venv package (apt install python3-venv), or activate a virtual environment of your own" >&2
        exit 2
    fi
fi
if ! runs "$venv/bin/python"; then
    echo "error: $venv/bin/python does not run (its base Python moved or was removed?); set HF_ENCODERIZE_VENV to a" \
        "new folder, or delete $venv and run this again" >&2
    exit 2
fi
echo "venv_python.sh: using $venv/bin/python (the project environment; activate it with: source $venv/bin/activate)" >&2
echo "$venv/bin/python"
