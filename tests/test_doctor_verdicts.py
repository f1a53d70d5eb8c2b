"""doctor's verdicts come from the commands' own checks (issue 67, point 7): it said "contrastive --lora-r is
refused" from a hand-written version table while `check_peft_integration` let the run go ahead."""

from hf_encoderize.common.errors import EncoderizeError
from hf_encoderize.matrix import doctor


def test_the_lora_verdict_is_the_contrastive_check(monkeypatch):
    import hf_encoderize.recipes.contrastive.model as model

    real = doctor.installed
    versions = {"transformers": "5.24.0", "peft": "0.21.2"}  # the table's "refused" versions
    monkeypatch.setattr(doctor, "installed", lambda name: versions.get(name) or real(name))
    monkeypatch.setattr(doctor, "hardware", lambda: {})
    monkeypatch.setattr(doctor, "auto_picks", lambda: {})
    monkeypatch.setattr(model, "check_peft_integration", lambda: None)  # the check lets --lora-r run
    assert not [line for line in doctor.doctor_report()["known_bad"] if "--lora-r" in line]

    def refuses():
        raise EncoderizeError("contrastive --lora-r needs peft >= 9 (installed: 0.21.2); pip install 'peft>=9'")

    monkeypatch.setattr(model, "check_peft_integration", refuses)
    said = [line for line in doctor.doctor_report()["known_bad"] if "--lora-r" in line]
    assert said == ["contrastive --lora-r is refused here: contrastive --lora-r needs peft >= 9 (installed: 0.21.2); "
                    "pip install 'peft>=9'"]


def test_the_lora_under_sharding_hint_names_what_a_pip_install_has():
    """The refusal sent users to examples/accelerate/*.yaml, which no wheel holds; it names accelerate's own launch."""
    from types import SimpleNamespace

    import pytest
    from accelerate.utils import DistributedType

    from hf_encoderize.recipes.cpt import check_launcher
    from hf_encoderize.training.lora import AdapterConfig

    with pytest.raises(EncoderizeError) as refused:
        check_launcher(SimpleNamespace(distributed_type=DistributedType.FSDP), AdapterConfig(lora_r=8))
    assert "accelerate launch --multi_gpu" in str(refused.value) and "examples/" not in str(refused.value)
