#!/usr/bin/env bash
# Make the wheel folder that `scripts/gpu_check.sh --wheels DIR` installs from on a GPU machine with no package index.
# Run it on a machine WITH PyPI, then copy DIR over (gpu_wheels/ is git-ignored):
#
#   bash scripts/gpu_wheels.sh gpu_wheels/                # plans against scripts/gpu_machine.txt: the lent machine
#                                                         # as last read (Python 3.12, torch 2.11, transformers 5.17, peft 0.21.0)
#   bash scripts/gpu_wheels.sh gpu_wheels/ freeze.txt     # or against what `pip freeze` printed on the GPU machine
#
# What goes in: hf-encoderize itself, built here as a pure-Python wheel with --no-deps; then every package that
# hf-encoderize's runtime (and the gguf extra) resolves to and the GPU machine
# lacks *or has at a version the resolution refuses* (scripts/gpu_wheels_plan.py: a package the machine has older than
# our floor travels), downloaded --no-deps as linux x86_64 wheels for each
# GPU_WHEELS_PYTHON version (default "3.12 3.13": the lent machine's, and the next). Never torch or what
# it pulls: the GPU machine's own CUDA build stays, and the resolution keeps to its torch version.
# The `kernels` extra (liger-kernel, cut-cross-entropy: pure Python on the machine's own triton) always goes in, so
# the MLM loss probe (`--loss-implementation auto`) has its candidates. GPU_WHEELS_EXTRAS="bitsandbytes" adds optional
# GPU packages that PyPI has as wheels (the QLoRA row). DeepSpeed (the ZeRO-2/3 rows) is an sdist: it is built here
# with DS_BUILD_OPS=0, so no op is compiled (a pure-Python wheel; its ops would JIT-compile on first use, and none is
# used: the shipped ZeRO configs name no DeepSpeed optimizer, so the engine's torch AdamW runs and nothing compiles on
# the device); its runtime requirements join the resolution. GPU_WHEELS_DEEPSPEED=0 leaves it out. flash-attn
# compiles CUDA kernels against torch: build its wheel where that torch is, and put it in DIR.
# FREEZE may also list bare package names (present, version unknown: taken as good enough).
#
# The image's own packages are respected (issue 65): the resolution is constrained to every version FREEZE pins that
# our requirements accept (`gpu_wheels_plan.py pins`), so it keeps the image's transformers and the huggingface_hub
# that transformers requires; and the plan is checked against the Requires-Dist of every package the image keeps
# (scripts/gpu_image_requires.json for scripts/gpu_machine.txt, read afresh from PyPI for another FREEZE). A plan that
# would break one (say huggingface_hub 2.4 beside the image's transformers 5.17, which refuses hub >= 2 at import) is
# refused: the script exits 1 and writes no folder. Wheels are planned for Python 3.12 and 3.13 (GPU_WHEELS_PYTHON),
# the later ones held to the first one's versions, so a drifted image still imports.
set -euo pipefail
out=$(realpath -m "${1:?usage: bash scripts/gpu_wheels.sh OUTDIR [FREEZE]}")
freeze=$(realpath "${2:-$(dirname "$0")/gpu_machine.txt}")
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap '[ -n "${GPU_WHEELS_DEBUG:-}" ] || rm -rf "$tmp"' EXIT
stage="$tmp/wheels"  # everything is made here first; OUTDIR gets it only once the plan is accepted
mkdir -p "$stage"
pip=(python3 -m pip --disable-pip-version-check)
platform=(--only-binary=:all: --implementation cp)
for glibc in $(seq 39 -1 5); do  # pip matches a manylinux tag exactly: name every glibc a wheel may be built for
    platform+=(--platform "manylinux_2_${glibc}_x86_64")
done
platform+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)

[ -d build ] && had_build=1 || had_build=
"${pip[@]}" wheel -q --no-deps -w "$stage" .
[ -n "$had_build" ] || rm -rf build  # setuptools' in-tree leftovers
if [ "${GPU_WHEELS_DEEPSPEED:-1}" != 0 ]; then
    if python3 -c "import torch" 2>/dev/null; then  # its setup.py imports torch: built without isolation, here
        ds="$(python3 -c 'import importlib.metadata as m; print("deepspeed==" + m.version("deepspeed"))' 2>/dev/null \
            || echo "deepspeed>=0.15")"  # the version the tests ran with, where installed
        DS_BUILD_OPS=0 "${pip[@]}" wheel -q --no-deps --no-build-isolation -w "$stage" "$ds"
    else
        echo "gpu_wheels.sh: no torch in $(command -v python3): deepspeed not built (run inside the project's venv)" >&2
    fi
fi

# Our runtime requirements (all of them wheels on PyPI), resolved afresh at the machine's torch version.
GPU_WHEELS_OUT="$stage" python3 - "$tmp" "$freeze" <<'EOF'
import os, re, sys, tomllib
tmp, freeze = sys.argv[1], sys.argv[2]
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
ours = project["dependencies"] + project["optional-dependencies"]["gguf"]
ours += project["optional-dependencies"]["kernels"]  # pure-Python Triton kernels: the loss probe's candidates
ours += os.environ.get("GPU_WHEELS_EXTRAS", "").split()
import glob, zipfile  # the built DeepSpeed wheel's own runtime requirements (no extras; torch stays the machine's)
out = os.environ["GPU_WHEELS_OUT"]
for wheel in glob.glob(f"{out}/deepspeed-*.whl"):
    with zipfile.ZipFile(wheel) as archive:
        metadata = archive.read(next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    ours += [line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")
             and "extra ==" not in line and not line.split(":", 1)[1].strip().startswith("torch")]
open(f"{tmp}/ours.txt", "w").write("\n".join(ours) + "\n")
torch = [m.group(1) for line in open(freeze) if (m := re.match(r"^torch==([^+\s]+)", line.strip()))]
open(f"{tmp}/torch.txt", "w").write(f"torch=={torch[0]}\n" if torch else "torch\n")
EOF

# The image's versions we accept, as constraints; and the Requires-Dist of what it keeps (recorded, or read afresh)
python3 scripts/gpu_wheels_plan.py pins "$freeze" "$tmp/ours.txt" > "$tmp/pins.txt"
if [ "$freeze" = "$(realpath scripts/gpu_machine.txt)" ]; then
    cp scripts/gpu_image_requires.json "$tmp/image.json"
else
    first_py=$(echo "${GPU_WHEELS_PYTHON:-3.12}" | cut -d' ' -f1)
    python3 scripts/gpu_wheels_plan.py record "$freeze" "$tmp/image.json" "$first_py"
fi
: > "$tmp/first.txt"  # the first Python's plan: later Pythons are held to its versions
pip_for() {  # pip_for PY: pip run by a Python PY where there is one. pip checks Requires-Python against its own
    # interpreter in a --target dry run, whatever --python-version says (pip 23.2: numpy 2.5.2 "requires a different
    # Python: 3.11.7"), so another interpreter would plan older releases, or refuse the image's own pins.
    local candidate
    for candidate in "$(command -v "python$1" || true)" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python; do
        if [ -n "$candidate" ] && "$candidate" -m pip --version > /dev/null 2>&1; then  # a pyenv shim may not run
            target_pip=("$candidate" -m pip --disable-pip-version-check)
            return
        fi
    done
    echo "gpu_wheels.sh: no Python $1 here: planning with $(python3 --version), ignoring Requires-Python" >&2
    target_pip=("${pip[@]}" --ignore-requires-python)
}
resolve() {  # resolve() PYTHON REPORT REQUIREMENTS_FILE [CONSTRAINTS...]: what pip would install there (metadata only)
    local py=$1 report=$2 requirements=$3
    shift 3
    "${target_pip[@]}" install -q --dry-run --ignore-installed --target "$tmp/target" --report "$report" \
        "${platform[@]}" --python-version "$py" -c "$tmp/torch.txt" "${@/#/-c}" -r "$requirements"
}
for py in ${GPU_WHEELS_PYTHON:-3.12 3.13}; do
    pip_for "$py"
    # the image's versions and the first Python's plan; then the image's alone; then ours alone (the check below
    # still refuses a plan that breaks what the image keeps)
    if ! resolve "$py" "$tmp/ours.json" "$tmp/ours.txt" "$tmp/pins.txt" "$tmp/first.txt" 2> "$tmp/resolve.log" &&
        ! resolve "$py" "$tmp/ours.json" "$tmp/ours.txt" "$tmp/pins.txt" 2> "$tmp/resolve.log"; then
        echo "Python $py: the image's versions and ours do not resolve together" \
            "($(grep -m1 -i error "$tmp/resolve.log")); resolving ours alone" >&2
        resolve "$py" "$tmp/ours.json" "$tmp/ours.txt"
    fi
    resolve "$py" "$tmp/torch.json" "$tmp/torch.txt"  # torch and what it pulls: always the machine's own
    if ! python3 scripts/gpu_wheels_plan.py plan "$tmp/ours.json" "$freeze" "$py" "$tmp/ours.txt" "$tmp/torch.json" \
        "$tmp/image.json" > "$tmp/missing.txt"; then
        echo "gpu_wheels.sh: no folder written (see above)" >&2
        exit 1
    fi
    [ -s "$tmp/first.txt" ] || cp "$tmp/missing.txt" "$tmp/first.txt"
    if [ -s "$tmp/missing.txt" ]; then
        echo "Python $py: $(tr '\n' ' ' < "$tmp/missing.txt")"
        "${target_pip[@]}" download -q --no-deps "${platform[@]}" --python-version "$py" -d "$stage" \
            -r "$tmp/missing.txt"
    fi
done
mkdir -p "$out"
cp "$stage"/*.whl "$out"/
echo "$(find "$out" -name '*.whl' | wc -l) wheels, $(du -sh "$out" | cut -f1), in $out"
echo "on the GPU machine: bash scripts/gpu_check.sh --wheels $out   (or GPU_CHECK_WHEELS=$out)"
