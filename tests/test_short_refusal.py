"""A command-line refusal is one `error:` line, not the command's whole usage (57 lines for cpt), and a config file
that tries to set a positional argument is told to put it on the command line (issue 41, round 2's leftovers)."""

import pytest

from hf_encoderize.cli import main


def _refusal(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_a_config_key_for_a_positional_argument_is_one_line(tmp_path, capsys):
    config = tmp_path / "cpt.yaml"
    config.write_text("source: some/model\nmax_steps: 3\n")
    err = _refusal(["cpt", "--config", str(config)], capsys)
    assert err.count("\n") == 1 and err.startswith("error: the following arguments are required: source"), err
    assert "put it on the command line" in err and "hf-encoderize cpt --help" in err


@pytest.mark.parametrize("argv", [["cpt"], ["cpt", "m", "--seqlen", "3"], ["eval", "m", "--no-such-flag"]])
def test_a_command_line_refusal_is_one_line(argv, capsys):
    err = _refusal(argv, capsys)
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
