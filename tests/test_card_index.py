"""The card's metadata speaks the Hub's language (issue 66 point 2): `model-index` holds only real datasets by their
Hub id, config and split, each metric named with its protocol, the source is this run; synthetic and smoke sets stay
in the body, marked; `.eval_results/*.yaml` follows huggingface_hub's schema."""

import json

import pytest
import yaml
from hub_server import make_run_folder, summary

from hf_encoderize.evaluation.loaders import dataset_spec
from hf_encoderize.publish.card import CardConfig, gather_facts, render_card, write_card


def with_summary(out, **changes):
    """Rewrite the run's eval summary: `rows` appended, other keys replaced."""
    path = out / "eval" / "encoder" / "summary.json"
    data = summary(str(out / "encoder"))
    data["results"] += changes.pop("rows", [])
    data.update(changes)
    path.write_text(json.dumps(data))
    return out


SYNTHETIC_ROW = {"task": "sc", "dataset": "syn-sentiment", "metric": "accuracy", "test_mean": 99.5, "test_ci95": None,
                 "n_seeds": 1, "extra_metrics": {}, "note": "synthetic offline set"}


def metadata(text: str) -> dict:
    return yaml.safe_load(text.split("---\n")[1])


def test_model_index_holds_real_datasets_by_hub_id_and_validates(tmp_path):
    from huggingface_hub import ModelCard
    from huggingface_hub.repocard_data import model_index_to_eval_results

    out = with_summary(make_run_folder(tmp_path), rows=[SYNTHETIC_ROW])
    readme = write_card(CardConfig(str(out)))
    name, results = model_index_to_eval_results(metadata(readme.read_text())["model-index"])
    assert name == "run" and results
    assert ModelCard.load(readme).data.eval_results  # huggingface_hub reads it back
    for result in results:
        spec = dataset_spec(result.dataset_name)
        assert (result.dataset_type, result.dataset_config, result.dataset_split) == (
            spec.hub, spec.config, spec.test_split) and "/" in result.dataset_type
    assert "syn-sentiment" not in {r.dataset_name for r in results}  # synthetic: out of the metadata ...
    text = readme.read_text()
    assert "| syn-sentiment | accuracy | 99.50 |" in text  # ... in the body, marked:
    assert "Synthetic: syn-sentiment is a set generated offline to check the pipeline" in text


def test_each_metric_names_its_protocol_and_the_source_is_this_run(tmp_path):
    from huggingface_hub.repocard_data import model_index_to_eval_results

    out = make_run_folder(tmp_path)
    local = render_card(gather_facts(CardConfig(str(out))))
    _, results = model_index_to_eval_results(metadata(local)["model-index"])
    sst2 = next(r for r in results if r.dataset_name == "sst2")
    assert sst2.metric_name == "accuracy (fine-tuned, quick profile, 3 seeds, lr chosen on validation)"
    assert all(r.source_url is None for r in results)  # no repo: no source URL, and never the paper's page
    pushed = render_card(gather_facts(CardConfig(str(out), repo_id="alice/enc")))
    _, results = model_index_to_eval_results(metadata(pushed)["model-index"])
    assert {r.source_url for r in results} == {"https://huggingface.co/alice/enc/blob/main/eval/summary.json"}
    with_summary(out, protocol={**summary("m")["protocol"], "frozen": True, "lrs": [1e-4]})
    _, results = model_index_to_eval_results(metadata(render_card(gather_facts(CardConfig(str(out)))))["model-index"])
    assert next(r for r in results if r.dataset_name == "sst2").metric_name == (
        "accuracy (frozen encoder, task head only, quick profile, 3 seeds, one lr)")


def test_smoke_profile_stays_out_of_the_metadata(tmp_path):
    out = with_summary(make_run_folder(tmp_path), profile="smoke")
    readme = write_card(CardConfig(str(out)))
    assert "model-index" not in metadata(readme.read_text())
    assert "kept out of this\ncard's metadata" in readme.read_text()
    assert not (readme.parent / ".eval_results").exists()


def test_eval_results_yaml_follows_the_hub_schema_and_is_pushed(tmp_path):
    from huggingface_hub import parse_eval_result_entries

    from hf_encoderize.publish.hub import encoder_upload

    out = with_summary(make_run_folder(tmp_path), rows=[SYNTHETIC_ROW])
    write_card(CardConfig(str(out)))
    path = out / "encoder" / ".eval_results" / "hf-encoderize.yaml"
    entries = parse_eval_result_entries(yaml.safe_load(path.read_text()))
    assert {(e.dataset_id, e.task_id) for e in entries} == {
        ("nyu-mll/glue", "sst2"), ("hgissbkh/conll2003-en", "conll2003"), ("rajpurkar/squad", "plain_text"),
        ("BeIR/msmarco", "msmarco")}
    assert all("fine-tuned, quick profile" in e.notes for e in entries)
    _, extra = encoder_upload(out, "alice/enc")
    pushed = parse_eval_result_entries(yaml.safe_load(extra[".eval_results/hf-encoderize.yaml"]))
    assert {e.source_url for e in pushed} == {"https://huggingface.co/alice/enc/blob/main/eval/summary.json"}
    assert json.loads(extra["eval/summary.json"])["results"][0]["dataset"] == "sst2"  # what the source points at


@pytest.mark.parametrize("source", ["original"])
def test_the_source_set_the_run_used_names_the_dataset(tmp_path, source):
    from huggingface_hub.repocard_data import model_index_to_eval_results

    out = with_summary(make_run_folder(tmp_path), protocol={**summary("m")["protocol"], "dataset_source": source})
    _, results = model_index_to_eval_results(metadata(render_card(gather_facts(CardConfig(str(out)))))["model-index"])
    assert next(r for r in results if r.dataset_name == "conll2003").dataset_type == "eriktks/conll2003"
