#!/usr/bin/env bash
# Make the wheel folder that `scripts/gpu_check.sh --wheels DIR` installs from on a GPU machine with no package index.
# Run it on a machine WITH PyPI, then copy DIR over (gpu_wheels/ is git-ignored):
#
#   bash scripts/gpu_wheels.sh gpu_wheels/                # plans against scripts/gpu_machine.txt: the lent machine
#                                                         # as last read (Python 3.12, torch 2.11, transformers 5.17, peft 0.21.0)
#   bash scripts/gpu_wheels.sh gpu_wheels/ freeze.txt     # or against what `pip freeze` printed on the GPU machine
#
# What goes in: hf-encoderize itself, built here as a pure-Python wheel with --no-deps; then every package that hf-encoderize's runtime (and the gguf extra) resolves to and the GPU machine
# lacks *or has at a version the resolution refuses* (scripts/gpu_wheels_plan.py: a package the machine has older than
# our floor travels), downloaded --no-deps as linux x86_64 wheels for each
# GPU_WHEELS_PYTHON version (default 3.12, the lent machine's; e.g. GPU_WHEELS_PYTHON="3.11 3.12"). Never torch or what
# it pulls: the GPU machine's own CUDA build stays, and the resolution keeps to its torch version.
# The `kernels` extra (liger-kernel, cut-cross-entropy: pure Python on the machine's own triton) always goes in, so
# the MLM loss probe (`--loss-implementation auto`) has its candidates. GPU_WHEELS_EXTRAS="bitsandbytes" adds optional
# GPU packages that PyPI has as wheels (the QLoRA row). DeepSpeed (the ZeRO-2/3 rows) is an sdist: it is built here
# with DS_BUILD_OPS=0, so no op is compiled (a pure-Python wheel; its ops would JIT-compile on first use, and none is
# used: the shipped ZeRO configs name no DeepSpeed optimizer, so the engine's torch AdamW runs and nothing compiles on
# the device); its runtime requirements join the resolution. GPU_WHEELS_DEEPSPEED=0 leaves it out. flash-attn
# compiles CUDA kernels against torch: build its wheel where that torch is, and put it in DIR.
# FREEZE may also list bare package names (present, version unknown: taken as good enough).
set -euo pipefail
out=$(realpath -m "${1:?usage: bash scripts/gpu_wheels.sh OUTDIR [FREEZE]}")
freeze=$(realpath "${2:-$(dirname "$0")/gpu_machine.txt}")
cd "$(dirname "$0")/.."
mkdir -p "$out"
tmp=$(mktemp -d)
trap '[ -n "${GPU_WHEELS_DEBUG:-}" ] || rm -rf "$tmp"' EXIT
pip=(python3 -m pip --disable-pip-version-check)
platform=(--only-binary=:all: --implementation cp)
for glibc in $(seq 39 -1 5); do  # pip matches a manylinux tag exactly: name every glibc a wheel may be built for
    platform+=(--platform "manylinux_2_${glibc}_x86_64")
done
platform+=(--platform manylinux2014_x86_64 --platform manylinux2010_x86_64 --platform manylinux1_x86_64)

[ -d build ] && had_build=1 || had_build=
"${pip[@]}" wheel -q --no-deps -w "$out" .
[ -n "$had_build" ] || rm -rf build  # setuptools' in-tree leftovers
if [ "${GPU_WHEELS_DEEPSPEED:-1}" != 0 ]; then
    if python3 -c "import torch" 2>/dev/null; then  # its setup.py imports torch: built without isolation, here
        ds="$(python3 -c 'import importlib.metadata as m; print("deepspeed==" + m.version("deepspeed"))' 2>/dev/null \
            || echo "deepspeed>=0.15")"  # the version the tests ran with, where installed
        DS_BUILD_OPS=0 "${pip[@]}" wheel -q --no-deps --no-build-isolation -w "$out" "$ds"
    else
        echo "gpu_wheels.sh: no torch in $(command -v python3): deepspeed not built (run inside the project's venv)" >&2
    fi
fi

# Our runtime requirements (all of them wheels on PyPI), resolved afresh at the machine's torch version.
GPU_WHEELS_OUT="$out" python3 - "$tmp" "$freeze" <<'EOF'
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

resolve() {  # resolve() PYTHON REPORT REQUIREMENTS_FILE: the versions pip would install there (metadata only)
    "${pip[@]}" install -q --dry-run --ignore-installed --target "$tmp/target" --report "$2" "${platform[@]}" \
        --python-version "$1" -c "$tmp/torch.txt" -r "$3"
}
for py in ${GPU_WHEELS_PYTHON:-3.12}; do
    resolve "$py" "$tmp/ours.json" "$tmp/ours.txt"
    resolve "$py" "$tmp/torch.json" "$tmp/torch.txt"  # torch and what it pulls: always the machine's own
    python3 scripts/gpu_wheels_plan.py "$tmp/ours.json" "$freeze" "$py" "$tmp/ours.txt" "$tmp/torch.json" \
        > "$tmp/missing.txt"
    if [ -s "$tmp/missing.txt" ]; then
        echo "Python $py: $(tr '\n' ' ' < "$tmp/missing.txt")"
        "${pip[@]}" download -q --no-deps "${platform[@]}" --python-version "$py" -d "$out" -r "$tmp/missing.txt"
    fi
done
echo "$(find "$out" -name '*.whl' | wc -l) wheels, $(du -sh "$out" | cut -f1), in $out"
echo "on the GPU machine: bash scripts/gpu_check.sh --wheels $out   (or GPU_CHECK_WHEELS=$out)"
