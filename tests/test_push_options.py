"""The push options (repo id checks, private, revision, commit message, create_pr, dry_run) have one owner,
`publish.hub.PushOptions`: `push` and `push-space` take them as their own flags, `--push-to-hub` as `--hub-*` flags
(issue 28 step 1). The flag names are unchanged."""

import dataclasses

import pytest

from hf_encoderize.cli import build_parser, main
from hf_encoderize.publish.hub import HubConfig, PushConfig, PushOptions
from hf_encoderize.publish.space import PushSpaceConfig

OPTIONS = [field.name for field in dataclasses.fields(PushOptions)]


@pytest.mark.parametrize("cls", [PushConfig, PushSpaceConfig])
def test_push_and_push_space_take_the_one_options_class(cls):
    assert issubclass(cls, PushOptions)
    assert set(OPTIONS) == {"private", "revision", "commit_message", "create_pr", "dry_run"}


def test_push_to_hub_gives_the_same_options():
    hub = HubConfig(push_to_hub="me/enc", hub_private=True, hub_revision="dev", hub_commit_message="m")
    assert hub.options() == PushOptions(private=True, revision="dev", commit_message="m")


@pytest.mark.parametrize("command", ["push", "push-space"])
def test_every_push_option_has_its_help(command):
    """The options' docstrings reach `--help` from the class that declares them."""
    sub = build_parser()._subparsers._group_actions[0].choices[command]
    helps = {action.dest: action.help for action in sub._actions}
    assert all(helps[name] and not helps[name].startswith(" (default") for name in OPTIONS), helps


CASES = {  # id: (argv after the command's positionals, text of the one error line)
    "push: a pull request on a branch": (["push", "OUT", "me/enc", "--hub-create-pr", "--hub-revision", "dev"],
                                         "--hub-create-pr opens a pull request against main; drop --hub-revision"),
    "push-space: a pull request on a branch": (["push-space", "OUT", "me/demo", "--hub-create-pr", "--hub-revision",
                                                "dev"],
                                               "--hub-create-pr opens a pull request against main; drop "
                                               "--hub-revision"),
    "cpt: a pull request on a branch": (["cpt", "MODEL", "--push-to-hub", "me/enc", "--hub-create-pr",
                                         "--hub-revision", "dev"],
                                        "--hub-create-pr opens a pull request against main; drop --hub-revision"),
    "push: a bad repo id": (["push", "OUT", "not a repo"], "not a repo"),
    "push-space: a bad space id": (["push-space", "OUT", "me/a b"], "me/a b"),
    "push-space: a bad model id": (["push-space", "OUT", "me/demo", "--model-id", "x//y"], "x//y"),
    "cpt: a bad push target": (["cpt", "MODEL", "--push-to-hub", "bad id!"], "bad id!"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_push_target_is_one_line(case, capsys):
    argv, message = CASES[case]
    assert main(argv) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], lines
