"""Run a short cpt under however many processes launched it; the main process writes the losses as JSON.

Usage: torchrun --nproc_per_node N tests/scripts/ddp_cpt.py MODEL_DIR DATA_FILE OUTPUT_DIR LOSSES_JSON BATCH GRAD_ACCUM
(BATCH rows per process per micro-batch; the global batch is N x BATCH x GRAD_ACCUM rows.)
"""

import json
import os
import pathlib
import sys

from hf_encoderize.common.launch import end_launched_process
from hf_encoderize.data.sources import DataConfig
from hf_encoderize.model.loading import LoadConfig
from hf_encoderize.objectives.masking import MaskingConfig
from hf_encoderize.recipes.cpt import cpt
from hf_encoderize.training.train_config import TrainConfig

model_dir, data_file, output_dir, losses_file, batch_size, grad_accum = sys.argv[1:7]
if os.environ.get("HIDE_SHARED_FOLDER_FROM_RANK") == os.environ.get("RANK"):
    # Simulate a machine that does not share the run folder: this rank cannot see files the main process writes.
    real_is_file = pathlib.Path.is_file
    pathlib.Path.is_file = lambda path: False if path.name.startswith(".shared-") else real_is_file(path)
summary = cpt(
    LoadConfig(model_dir),
    DataConfig(data_files=data_file, seq_len=32, eval_documents=8),
    MaskingConfig(),
    TrainConfig(output_dir=output_dir, steps=5, batch_size=int(batch_size), grad_accum=int(grad_accum), lr=1e-3,
                save_every=5, eval_every=0, log_every=100, progress=False),
)
# Every process returns only once the main process has saved the encoder (a next stage may read it at once).
saved = (pathlib.Path(output_dir) / "encoder" / "model.safetensors").is_file()
pathlib.Path(f"{losses_file}.rank{os.environ.get('RANK', '0')}").write_text(json.dumps({"encoder_saved": saved}))
if os.environ.get("RANK", "0") == "0":
    with open(losses_file, "w") as handle:
        json.dump(summary["losses"], handle)
# As the CLI ends a launched process (gloo's threads outlive the process group and can abort an ordinary exit).
end_launched_process(0)
