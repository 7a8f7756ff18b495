"""Every program of ours, built here, against the one command-line contract (tparams.program_cli): its
--help lists exactly its role's flags, every one of them parses with the value its callers render, and
another spelling (underscores, one dash, the names of before) is refused in one line with status 2.

The programs are found where their callers find them: the lab kinds with a role, the replay stacks
driven through our own programs, and the lab's resolver. Real binaries, jars and scripts; one not built
here is skipped, saying why.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable

import pytest

from lab.kinds import known_kinds
from replay.stacks import every_stack
from replay.stacks.base import ReplayProgram
from tparams import program_cli

# A value of each kind that every program's parser takes (a switch is given bare).
SAMPLES = {"address": "127.0.0.1:9", "path": "/dev/null", "integer": 7, "seconds": 1.5, "switch": True,
           "boolean": True, "list": ["h3", "hq-interop"], "text": "x"}
OWN_SAMPLES = {"preferred_address": "127.0.0.1:4434", "mode": "garbage"}


def programs() -> list:
    """(role, program argv, why it cannot run or None), one pytest param per program."""
    found = [pytest.param("resolver", lambda: [sys.executable, "-m", "lab.dns_server"], lambda: None,
                          id="lab.dns_server")]
    for kind in known_kinds().values():
        if kind.role:
            found.append(pytest.param(kind.role, kind.program, kind.unavailable_reason, id=f"lab-{kind.name}"))
    for stack in every_stack().values():
        if isinstance(stack, ReplayProgram):
            for role in ("server", "client", *(["stream-client"] if "paced" in stack.replay_protocol else [])):
                found.append(pytest.param(f"replay-{role}", lambda stack=stack, role=role: stack.command(role),
                                          stack.unavailable_reason, id=f"{stack.name}-{role}"))
    return found


def runnable(program: Callable[[], list[str]], unavailable: Callable[[], str | None]) -> list[str]:
    reason = unavailable()
    if reason:
        pytest.skip(reason)
    return program()


def run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def sample(role: str, names) -> dict:
    return {name: OWN_SAMPLES[name] if name in OWN_SAMPLES else program_cli.OPTIONS[name].choices[0]
            if program_cli.OPTIONS[name].kind == "choice" else SAMPLES[program_cli.OPTIONS[name].kind]
            for name in names}


def required(role: str) -> list[str]:
    """The role's address and required flags, with values a parser takes."""
    return program_cli.arguments(role, sample(role, [name for name in program_cli.ROLES[role]
                                                     if program_cli.OPTIONS[name].required]))


def test_every_role_spells_each_flag_once():
    """The contract itself: kebab-case flags of snake_case names, no flag in two spellings."""
    for role, names in program_cli.ROLES.items():
        flags = [program_cli.OPTIONS[name].flag for name in names if not program_cli.OPTIONS[name].positional]
        assert all(re.fullmatch(r"--[a-z0-9]+(-[a-z0-9]+)*", flag) for flag in flags), role
        assert len(set(flags)) == len(flags), role
        assert [name for name in names if program_cli.OPTIONS[name].positional] == [names[0]], role


def test_callers_render_exactly_the_contract():
    assert program_cli.arguments("replay-client", {"timeout_s": 600.0, "connect": "[2001:2::1]:443",
                                                   "disable_active_migration": False, "autotune": True,
                                                   "initial_max_data": 5, "keylog": None}) == [
        "[2001:2::1]:443", "--timeout-s=600", "--autotune", "--initial-max-data=5"]
    assert program_cli.address("2001:2::1", 443) == "[2001:2::1]:443"
    assert program_cli.split_address("[2001:2::1]:443") == ("2001:2::1", 443)
    with pytest.raises(ValueError, match="takes no cid_length"):
        program_cli.arguments("replay-server", {"cid_length": 8})
    with pytest.raises(ValueError, match="--cc takes cubic, bbr"):
        program_cli.arguments("replay-server", {"cc": "reno"})


@pytest.mark.parametrize(("role", "program", "unavailable"), programs())
def test_help_lists_exactly_the_roles_flags(role, program, unavailable):
    done = run([*runnable(program, unavailable), "--help"])
    assert done.returncode == 0, done.stderr
    listed = set(re.findall(r"^\s+(?:-\w, )?(--[a-z][a-z0-9_-]*)", done.stdout, re.MULTILINE)) - {"--help"}
    expected = {program_cli.OPTIONS[name].flag for name in program_cli.ROLES[role]} - {""}
    assert listed == expected, (sorted(listed - expected), sorted(expected - listed))


@pytest.mark.parametrize(("role", "program", "unavailable"), programs())
def test_every_flag_parses_as_its_callers_render_it(role, program, unavailable):
    """All of the role's flags, rendered by the callers' function, then --help: a parser that refuses
    one of them, or takes a switch's next word as its value, fails before it reaches --help."""
    argv = [*runnable(program, unavailable), *program_cli.arguments(role, sample(role, program_cli.ROLES[role])),
            "--help"]
    done = run(argv)
    assert done.returncode == 0, (argv, done.stderr)


@pytest.mark.parametrize(("role", "program", "unavailable"), programs())
def test_other_spellings_are_refused(role, program, unavailable):
    argv = [*runnable(program, unavailable), *required(role)]
    names = program_cli.ROLES[role]
    others = ["--host=127.0.0.1", "--port=443"]
    others += ["--certificate=/dev/null", "--private_key=/dev/null"] if "cert" in names else []
    others += ["--timeout=5", "--addr=127.0.0.1:9"] if "timeout_s" in names else []
    others += ["--initial_max_data=5", "--qlog_dir=/tmp"] if "qlog_dir" in names else []
    others += ["--initial_max_data=5", "--cid_length=8"] if "cid_length" in names else []
    for spelling in others:
        done = run([*argv, spelling])
        name = spelling.lstrip("-").split("=")[0]
        assert done.returncode == 2 and name in done.stderr, (spelling, done.returncode, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
    flag = program_cli.OPTIONS[names[-1]].flag
    done = run([*argv, flag[1:] + "=1"])  # one dash: Go's flag package takes it, ours refuse it
    assert done.returncode == 2 and flag[1:3] in done.stderr, (flag[1:], done.stderr)

