"""Signals held back while a step must complete or not start: a process handed to the owner that stops it, a
statement DuckDB would otherwise abandon half-way."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM that land inside the block take effect as it ends.

    Start a process and hand it to the owner that stops it (a list its teardown walks, a variable its ``finally``
    reads) inside one such block: a signal between the two would otherwise unwind past an owner that never held
    the process, and leave it running (a two-host run's server, on the other host, after a SIGTERM mid-start: CI,
    2026-11-28). Write to DuckDB inside one: it answers a Ctrl-C mid-statement by abandoning the statement with
    ``RuntimeError: Query interrupted``, not KeyboardInterrupt (a replay's round of runs, 2026-11-29)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # Python runs signal handlers in the main thread only: none can interrupt this one
        return
    pending: list[int] = []
    previous = {sig: handler for sig in (signal.SIGINT, signal.SIGTERM)
                if (handler := signal.getsignal(sig)) is not None}  # None: a handler not set from Python, left as is
    # signal.signal runs the handlers of signals already arrived, which may raise: every handler set here is set
    # back whatever happens, else a Ctrl-C would be noted in a list nobody reads from then on
    try:
        with contextlib.ExitStack() as restoring:
            for sig, handler in previous.items():
                restoring.callback(signal.signal, sig, handler)
                signal.signal(sig, lambda signum, _frame: pending.append(signum))
            yield
    finally:  # the signal, in place of whatever the block raised, as it would have landed
        if pending:
            handler = previous[pending[0]]
            if callable(handler):
                handler(pending[0], None)
            elif handler == signal.SIG_DFL:
                signal.raise_signal(pending[0])
