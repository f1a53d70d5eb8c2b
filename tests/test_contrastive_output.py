"""`contrastive` given a run folder writes into that run (issue 66 point 6): RUN/contrastive is where `card RUN`,
`eval`, `push` and `space RUN` look for a run's embedding model."""

from hub_server import make_run_folder

from hf_encoderize.recipes.contrastive import ContrastiveConfig


def test_a_run_folder_gets_its_own_contrastive_folder_by_default(tmp_path):
    run = make_run_folder(tmp_path, evaluated=False, base_evaluated=False)
    for given in (run, run / "encoder", f"{run}/"):
        assert ContrastiveConfig(str(given), data_files="pairs.jsonl").output_dir == str(run / "contrastive")
    assert ContrastiveConfig(str(run), data_files="pairs.jsonl", output_dir="elsewhere").output_dir == "elsewhere"


def test_any_other_encoder_keeps_the_shared_default(tmp_path):
    run = make_run_folder(tmp_path, evaluated=False, base_evaluated=False)
    (run / "run_record.json").unlink()  # a folder that is no run: nothing to write into
    assert ContrastiveConfig(str(run / "encoder"), data_files="p.jsonl").output_dir == "runs/contrastive"
