"""infra.command: a command line taken apart, and each refusal with its message."""

from __future__ import annotations

import pytest

from infra.command import ALLOWED_FORMS, Command, CommandError, split_command, starts_command

pytestmark = pytest.mark.unit


def refusal(command: str | list[str]) -> str:
    """The message split_command refuses `command` with (it must refuse it)."""
    with pytest.raises(CommandError) as e:
        split_command(command)
    return str(e.value)


def test_deepspeed_tutorial_command() -> None:
    """The seed guides' command splits into launcher, script and the script's arguments."""
    assert split_command("deepspeed train.py --deepspeed --deepspeed_config ds_config.json") == (
        Command(
            "deepspeed",
            ("deepspeed",),
            (),
            False,
            "train.py",
            ("--deepspeed", "--deepspeed_config", "ds_config.json"),
        )
    )


def test_list_is_taken_as_its_words() -> None:
    """A list is not re-split: a word with a space stays one argument."""
    parsed = split_command(["torchrun", "train.py", "--name", "a b"])
    assert parsed.args == ("--name", "a b"), parsed


def test_string_is_split_as_a_shell_would() -> None:
    """A quoted word of a string is one argument."""
    assert split_command("torchrun train.py --name 'a b'").args == ("--name", "a b")


def test_unbalanced_quote_is_refused() -> None:
    """A string a shell cannot split is refused with what is allowed."""
    assert refusal("torchrun train.py --name 'a b").startswith(
        '"torchrun train.py --name \'a b" is not a command line a shell can split'
    )


def test_deepspeed_options_before_the_script_are_kept() -> None:
    """deepspeed's own options (one with a value) stay the launcher's, in order."""
    parsed = split_command("deepspeed --bind_core_list 0-3 --no_local_rank train.py --x 1")
    assert (parsed.options, parsed.target, parsed.args) == (
        ("--bind_core_list", "0-3", "--no_local_rank"),
        "train.py",
        ("--x", "1"),
    )


def test_deepspeed_module() -> None:
    """`deepspeed --module m` runs a module."""
    parsed = split_command("deepspeed --module mypkg.train --epochs 3")
    assert (parsed.module, parsed.target, parsed.args) == (True, "mypkg.train", ("--epochs", "3"))


def test_script_options_after_the_script_are_the_scripts() -> None:
    """A launcher option after the script is the script's argument, untouched."""
    assert split_command("deepspeed train.py --master_port 1").args == ("--master_port", "1")


@pytest.mark.parametrize(
    ("word", "why"),
    [
        ("--hostfile=h", "the program sets it from the task roster"),
        ("-H", "the program sets it from the task roster"),
        ("--master_addr=x", "the program sets it from the task roster"),
        ("--master_port=1", "set training.master_port"),
        ("--node_rank=0", "the program sets it from the task roster"),
        ("--no_ssh", "set training.launch_mode"),
        ("--launcher=pdsh", "set training.launch_mode"),
        ("--ssh_port=22", "set training.sshd_port"),
        ("--num_nodes=2", "set training.nodes"),
        ("--include=a", "set training.nodes"),
        ("--exclude=a", "set training.nodes"),
        ("--force_multi", "the program chooses the launch mode"),
        ("--elastic_training", "elastic training is not supported"),
        ("--autotuning=run", "autotuning is not supported"),
    ],
)
def test_deepspeed_owned_option_is_refused(word: str, why: str) -> None:
    """Each deepspeed option the program owns is refused, naming it and what to do."""
    assert refusal(f"deepspeed {word} train.py").startswith(
        f"deepspeed option {word!r} is the program's ({why}); allowed: --account,"
    )


def test_abbreviated_owned_option_is_refused() -> None:
    """An argparse prefix of an owned option is that option."""
    assert refusal("deepspeed --master_p=1 train.py").startswith(
        "deepspeed option '--master_p=1' is the program's (set training.master_port)"
    )


def test_unknown_deepspeed_option_is_refused() -> None:
    """An option deepspeed's runner does not have is refused with the allowed ones."""
    assert refusal("deepspeed --bogus train.py") == (
        "deepspeed option '--bogus' is not one the program knows; allowed: --account, "
        "--bind_core_list, --bind_cores_to_rank, --comment, --enable_each_rank_log, "
        "--module, --no_local_rank, --no_python, --no_ssh_check, --save_pid"
    )


@pytest.mark.parametrize(
    "word",
    [
        "--nnodes=2",
        "--nproc_per_node=2",
        "--nproc-per-node=2",
        "--node_rank=0",
        "--master_addr=x",
        "--master-port=1",
        "--standalone",
        "--rdzv_backend=c10d",
        "--rdzv-endpoint=x:1",
        "--rdzv_id=1",
        "--rdzv-conf=a=b",
    ],
)
def test_torchrun_owned_option_is_refused(word: str) -> None:
    """Each torchrun option the program owns is refused, in either spelling."""
    assert refusal(f"torchrun {word} train.py").startswith(
        f"torchrun option {word!r} is the program's"
    )


def test_torchrun_module_flag() -> None:
    """torchrun's `-m` is a flag: the next word is the module."""
    parsed = split_command("torchrun --max_restarts 1 -m pkg.train --lr 0.1")
    assert (parsed.options, parsed.module, parsed.target, parsed.args) == (
        ("--max_restarts", "1", "-m"),
        True,
        "pkg.train",
        ("--lr", "0.1"),
    )


def test_torchrun_option_without_its_value_is_refused() -> None:
    """A value-taking option at the end names itself."""
    assert refusal("torchrun --log-dir") == "torchrun option '--log-dir' takes a value; none given"


def test_python_m_torch_distributed_run_is_torchrun() -> None:
    """`python -m torch.distributed.run` is torchrun, its options judged as torchrun's."""
    parsed = split_command("python3 -m torch.distributed.run --role r train.py")
    assert (parsed.launcher, parsed.typed, parsed.options, parsed.target) == (
        "torchrun",
        ("python3", "-m", "torch.distributed.run"),
        ("--role", "r"),
        "train.py",
    )


def test_python_m_torch_distributed_run_owned_option() -> None:
    """The module spelling refuses what torchrun refuses."""
    assert refusal("python -m torch.distributed.run --nnodes=2 t.py").startswith(
        "torchrun option '--nnodes=2' is the program's"
    )


def test_plain_python_script() -> None:
    """`python -u script args` is a plain script, its -u kept."""
    parsed = split_command("python -u train.py --epochs 3")
    assert (parsed.launcher, parsed.options, parsed.target, parsed.args) == (
        "python",
        ("-u",),
        "train.py",
        ("--epochs", "3"),
    )


def test_plain_python_module() -> None:
    """`python -m module` runs a module under the configured launcher."""
    parsed = split_command("/usr/bin/python3.11 -m mypkg.train")
    assert (parsed.launcher, parsed.module, parsed.target) == ("python", True, "mypkg.train")


def test_python_option_other_than_u_is_refused() -> None:
    """An interpreter option the launcher cannot pass on is refused."""
    assert refusal("python -c 'print(1)'") == (
        "python option '-c': the launcher starts the interpreter itself; allowed: -u, then "
        "a script or -m module"
    )


def test_accelerate_is_refused() -> None:
    """`accelerate launch` is refused: the image has no Accelerate."""
    assert refusal("accelerate launch train.py") == (
        f"'accelerate': Hugging Face Accelerate is not in the image; allowed: {ALLOWED_FORMS} "
        "(a script that uses Accelerate runs under torchrun)"
    )


def test_other_programs_are_refused() -> None:
    """A command that is no launcher or interpreter is refused."""
    assert refusal("bash run.sh") == (
        f"'bash' is not a launcher or a Python interpreter; allowed: {ALLOWED_FORMS}"
    )


def test_empty_command_is_refused() -> None:
    """An empty command is refused."""
    assert refusal([]) == f"the command is empty; allowed: {ALLOWED_FORMS}"


def test_launcher_without_a_script_is_refused() -> None:
    """A launcher with options and no script names what it read."""
    assert refusal("deepspeed --no_local_rank") == (
        f"'deepspeed --no_local_rank' names no script; allowed: {ALLOWED_FORMS}"
    )


@pytest.mark.parametrize(
    ("command", "path"),
    [
        ("deepspeed t.py --deepspeed --deepspeed_config ds.json", "ds.json"),
        ("deepspeed t.py --deepspeed_config=cfg/ds.json", "cfg/ds.json"),
        ("deepspeed t.py --deepspeed", None),
    ],
)
def test_deepspeed_config_argument(command: str, path: str | None) -> None:
    """The script's `--deepspeed_config`, in either form, is the command's config file."""
    assert split_command(command).deepspeed_config == path


@pytest.mark.parametrize(
    "words",
    [
        ["deepspeed", "train.py"],
        ["/opt/venv/bin/torchrun", "train.py"],
        ["python", "-m", "torch.distributed.run", "train.py"],
        ["python3.11", "train.py"],
        ["accelerate", "launch", "train.py"],  # a command, so the config names why it is not
    ],
)
def test_a_launcher_or_interpreter_starts_a_command(words: list[str]) -> None:
    assert starts_command(words)


@pytest.mark.parametrize(
    "words", [[], ["--lr", "1e-3"], ["train.py", "--epochs", "3"], ["pythonic"], ["bash"]]
)
def test_script_arguments_do_not_start_a_command(words: list[str]) -> None:
    assert not starts_command(words)
