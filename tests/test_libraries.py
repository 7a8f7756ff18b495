"""The library descriptors (tparams/libraries.py) against their readers: every lab kind and replay stack of
a library finds its own, and what a descriptor says fits what its users can do with it."""

from __future__ import annotations

import pytest

from lab.kinds import known_kinds
from replay.stacks import all_stacks
from tparams import program_cli
from tparams.libraries import HELD_OUT, LIBRARIES


# The project's own kinds (a test module may register one of its own before this one is collected), except
# the broken servers, which are no library.
@pytest.mark.parametrize("kind", sorted(name for name, kind in known_kinds().items()
                                        if type(kind).__module__.startswith("lab.") and "broken" not in name
                                        and "garbage" not in name))
def test_every_lab_kind_of_a_library_reads_its_descriptor(kind):
    assert known_kinds()[kind].descriptor is not None


@pytest.mark.parametrize("name", sorted(all_stacks()))
def test_every_replay_stack_reads_its_descriptor(name):
    stack = all_stacks()[name]
    assert stack.library is not None
    for role in ("client", "server"):
        # a value the stack can set is no fixed value of its library
        assert not set(stack.library.fixed_for(role)) & stack.settable[role], (name, role)


@pytest.mark.parametrize("library", LIBRARIES, ids=lambda library: library.name)
def test_held_out_choices_are_offered(library):
    assert set(library.offered) <= set(program_cli.APPLICATION)
    if library.held_out is not None:
        assert set(library.held_out["application"]) <= set(library.offered)
        assert HELD_OUT[library.name] is library.held_out


def test_kwiks_h3_server_reports_what_kwik_sends_of_a_set_and_why_not_the_rest():
    """kwik's stack (a server for the browsers) gives its command line the set's bidi_remote as kwik's one bidi
    window, and reports as applied exactly what the lab's kwik kind predicts it sends (lab.kinds.kwik), each other
    value not applied with why."""
    from lab.kinds.kwik import sent_parameters
    from replay.stacks import get_stack
    from tparams.paramset import ParamSet

    stack = get_stack("kwik")
    given, applied = stack.command_values(ParamSet(
        initial_max_data=100_000, initial_max_stream_data_bidi_remote=262_144, initial_max_stream_data_bidi_local=1,
        initial_max_streams_bidi=7, max_idle_timeout=0, max_ack_delay=25, ack_delay_exponent=4))
    assert given == {"initial_max_data": 100_000, "initial_max_stream_data_bidi_remote": 262_144,
                     "initial_max_streams_bidi": 7, "initial_max_streams_uni": 3}
    assert sent_parameters(given)["initial_max_data"] == 262_144  # kwik's connection window at least the stream's
    assert applied.applied == {"initial_max_stream_data_bidi_remote": 262_144, "initial_max_streams_bidi": 7,
                               "max_ack_delay": 25}  # kwik's own 25, as asked
    assert applied.not_applied == {"initial_max_data": 100_000, "initial_max_stream_data_bidi_local": 1,
                                   "max_idle_timeout": 0, "ack_delay_exponent": 4}
    assert len(applied.notes) == 4 and "cannot set ack_delay_exponent" in applied.notes[-1], applied.notes
    assert stack.roles == {"server"} and stack.serves("h3") and {"down", "up", "many"} <= stack.page_protocol


def test_kwiks_h3_server_is_started_warmed(tmp_path):
    """A fresh JVM answered Chromium's first Initial 0.6 s late and a page's first requests in 40-290 ms (2026-11-29):
    qreplay's kwik server runs its own paths before it listens (KwikLabServer.warmUp), asked through the environment
    its stored command line shows."""
    from replay.stacks import get_stack
    from replay.stacks.base import RunOptions
    from replay.stacks.kwik import WARM_UP_ENV

    argv, _ = get_stack("kwik").server_command(None, RunOptions(size=1), "198.18.100.2", 4433, tmp_path)
    assert argv[0] == "env" and f"{WARM_UP_ENV}=1" in argv[:argv.index("java")], argv
