"""Run a short cpt under however many processes launched it; the main process writes the losses as JSON.

Usage: torchrun --nproc_per_node N tests/scripts/ddp_cpt.py MODEL_DIR DATA_FILE OUT_DIR LOSSES_JSON
"""

import json
import os
import sys

from hf_encoderize.cpt import cpt
from hf_encoderize.data import DataConfig
from hf_encoderize.loading import LoadConfig
from hf_encoderize.masking import MaskingConfig
from hf_encoderize.train import TrainConfig

model_dir, data_file, out_dir, losses_file = sys.argv[1:5]
world_size = int(os.environ.get("WORLD_SIZE", "1"))
summary = cpt(
    LoadConfig(model_dir),
    DataConfig(data_files=data_file, seq_len=32, eval_documents=8),
    MaskingConfig(),
    # The same global batch (4 rows) for any world size.
    TrainConfig(output_dir=out_dir, steps=5, batch_size=4 // world_size, lr=1e-3, save_every=5, eval_every=0,
                log_every=100),
)
import torch.distributed as dist  # noqa: E402

if not dist.is_initialized() or dist.get_rank() == 0:
    with open(losses_file, "w") as handle:
        json.dump(summary["losses"], handle)
