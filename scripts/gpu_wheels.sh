#!/usr/bin/env bash
# Make the wheel folder that `scripts/gpu_check.sh --wheels DIR` installs from on a GPU machine with no package index.
# Run it on a machine WITH PyPI, then copy DIR over (gpu_wheels/ is git-ignored):
#
#   bash scripts/gpu_wheels.sh gpu_wheels/                # the GPU machine has torch, transformers, accelerate, peft
#                                                         # and sentence-transformers, and their dependencies
#   bash scripts/gpu_wheels.sh gpu_wheels/ freeze.txt     # or exactly what its `pip freeze` lists (versions kept)
#
# What goes in: hf-encoderize itself and seqeval (an sdist upstream), both built here as pure-Python wheels with
# --no-deps; then every package that hf-encoderize's runtime (and the gguf extra) resolves to and the GPU machine
# lacks, downloaded --no-deps as linux x86_64 wheels for each GPU_WHEELS_PYTHON version (default 3.11; e.g.
# GPU_WHEELS_PYTHON="3.11 3.12"). Never torch or what it pulls: the GPU machine's own CUDA build stays.
# The `kernels` extra (liger-kernel, cut-cross-entropy: pure Python on the machine's own triton) always goes in, so
# the MLM loss probe (`--loss-implementation auto`) has its candidates. GPU_WHEELS_EXTRAS="bitsandbytes" adds optional GPU packages that PyPI has as wheels (the QLoRA row). deepspeed and
# flash-attn are sdists that compile against torch: build their wheels where that torch is, and put them in DIR.
# FREEZE may also be a plain list of package names, one a line (then no versions are pinned).
set -euo pipefail
out=$(realpath -m "${1:?usage: bash scripts/gpu_wheels.sh OUTDIR [FREEZE]}")
freeze=${2:+$(realpath "$2")}
cd "$(dirname "$0")/.."
mkdir -p "$out"
tmp=$(mktemp -d)
trap '[ -n "${GPU_WHEELS_DEBUG:-}" ] || rm -rf "$tmp"' EXIT
pip=(python3 -m pip --disable-pip-version-check)
platform=(--only-binary=:all: --implementation cp)
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
    platform+=(--platform "${tag}_x86_64")
done

[ -d build ] && had_build=1 || had_build=
"${pip[@]}" wheel -q --no-deps -w "$out" . "seqeval>=1.2"
[ -n "$had_build" ] || rm -rf build  # setuptools' in-tree leftovers

# Our runtime requirements (seqeval is built above), and what the GPU machine already has.
python3 - "$tmp" "$freeze" <<'EOF'
import os, re, sys, tomllib
tmp, freeze = sys.argv[1], sys.argv[2]
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
ours = [r for r in project["dependencies"] + project["optional-dependencies"]["gguf"] if not r.startswith("seqeval")]
ours += project["optional-dependencies"]["kernels"]  # pure-Python Triton kernels: the loss probe's candidates
ours += os.environ.get("GPU_WHEELS_EXTRAS", "").split()
open(f"{tmp}/ours.txt", "w").write("\n".join(ours) + "\n")
if freeze:  # name==version lines only: local builds (torch 2.x+cu130, `@ file://`) are not on PyPI
    pins = [line.strip() for line in open(freeze) if re.match(r"^[A-Za-z0-9_.-]+==[^+@\s]+$", line.strip())]
    names = [re.split(r"[=@ ]", line.strip())[0] for line in open(freeze) if re.match(r"^[A-Za-z0-9_.-]", line)]
    open(f"{tmp}/constraints.txt", "w").write("\n".join(pins) + "\n")
    open(f"{tmp}/freeze-names.txt", "w").write("\n".join(names + ["pip", "setuptools", "wheel"]) + "\n")
# torch and everything it pulls (CUDA libraries, triton) always count as there.
base = ["torch"] if freeze else ["torch", "transformers", "accelerate", "peft", "sentence-transformers"]
open(f"{tmp}/base.txt", "w").write("\n".join(base) + "\n")
if not freeze:
    open(f"{tmp}/constraints.txt", "w").write("")
EOF

resolve() {  # resolve() PYTHON REPORT REQUIREMENTS_FILE: the versions pip would install there (metadata only)
    "${pip[@]}" install -q --dry-run --ignore-installed --target "$tmp/target" --report "$2" "${platform[@]}" \
        --python-version "$1" -c "$tmp/constraints.txt" -r "$3"
}
names() {  # names() REPORT: name==version of each package in a resolution report, one a line
    python3 -c 'import json, sys; print("\n".join(i["metadata"]["name"] + "==" + i["metadata"]["version"]
                                               for i in json.load(open(sys.argv[1]))["install"]))' "$1"
}
for py in ${GPU_WHEELS_PYTHON:-3.11}; do
    resolve "$py" "$tmp/ours.json" "$tmp/ours.txt"
    names "$tmp/ours.json" > "$tmp/ours-pins.txt"
    resolve "$py" "$tmp/base.json" "$tmp/base.txt"
    { names "$tmp/base.json" | cut -d= -f1; [ -z "$freeze" ] || cat "$tmp/freeze-names.txt"; } > "$tmp/have.txt"
    # Keep what the GPU machine lacks (names compared as PEP 503 normalises them).
    python3 - "$tmp" > "$tmp/missing.txt" <<'EOF'
import re, sys
norm = lambda name: re.sub(r"[-_.]+", "-", name).lower()
have = {norm(line.strip().split("==")[0]) for line in open(f"{sys.argv[1]}/have.txt") if line.strip()}
pins = open(f"{sys.argv[1]}/ours-pins.txt").read().split()
print("\n".join(pin for pin in pins if norm(pin.split("==")[0]) not in have))
EOF
    if [ -s "$tmp/missing.txt" ]; then
        echo "Python $py: $(tr '\n' ' ' < "$tmp/missing.txt")"
        "${pip[@]}" download -q --no-deps "${platform[@]}" --python-version "$py" -d "$out" -r "$tmp/missing.txt"
    fi
done
echo "$(find "$out" -name '*.whl' | wc -l) wheels, $(du -sh "$out" | cut -f1), in $out"
echo "on the GPU machine: bash scripts/gpu_check.sh --wheels $out   (or GPU_CHECK_WHEELS=$out)"
