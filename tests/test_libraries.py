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
