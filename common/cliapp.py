"""Shared plumbing of the qscan and qreplay command lines.

Both CLIs are thin typer layers over library functions. Typer already turns
usage errors and Ctrl-C into one line and an exit status; this adds the same
for ToolError, raised anywhere below for bad input or an unusable machine, and
for a path that cannot be written.

Every option naming a file or directory a command writes is declared with
``callback=output_file`` or ``callback=output_dir``: a path the user gives is
checked while the command line is read, before anything is measured, so an
unwritable place costs no data (tests/test_cli_outputs.py finds the outputs of
every command by these callbacks).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable, Mapping
import tempfile
from pathlib import Path

import typer

from tparams.errors import ToolError, first_line


# Where a reader goes from any --help: the manual's pages within the repository.
MANUAL = "Manual: docs/overview.md and the pages beside it (make docs builds them as a site: out/docs/index.html)."


def make_app(help_text: str, example: str, commands: str = "", modules: tuple[str, ...] = ()) -> typer.Typer:
    """A tool's app; each of the ``modules`` of package ``commands`` (one a command group) adds its
    commands to it through its ``register(app)``."""
    app = typer.Typer(
        help=help_text,
        epilog=f"Example: {example}\n\n{MANUAL}",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    for name in modules:
        importlib.import_module(f"{commands}.{name}").register(app)
    return app


def add_group(app: typer.Typer, name: str, help_text: str, example: str) -> typer.Typer:
    """A group of commands under ``app`` (``qscan lab``, ``qscan campaign``): its help, an example,
    and that help when it is called without a command."""
    group = typer.Typer(help=help_text, epilog=f"Example: {example}", no_args_is_help=True)
    app.add_typer(group, name=name)
    return group


def check_writable(path: Path, directory: bool) -> None:
    """Refuse in one line a file or directory this process cannot create or write.

    Tried, not inferred from permission bits (root ignores those; a read-only
    mount, a path through a regular file or /proc refuse root too): a file is
    created and removed in the directory that would hold the output, nothing
    else is left behind (no directories made)."""
    if path.exists() and path.is_dir() != directory:
        raise ToolError(f"cannot write {path}: {'not a directory' if directory else 'it is a directory'}")
    holder = path if directory else path.parent
    while not holder.exists():  # the nearest existing ancestor is where a new path would be made
        holder = holder.parent
    if not holder.is_dir():
        raise ToolError(f"cannot write {path}: {holder} is not a directory")
    try:
        with tempfile.TemporaryFile(dir=holder):
            pass
    except OSError as exc:
        raise ToolError(f"cannot write {path}: {holder} takes no new files ({exc.strerror or exc})") from None
    if path.is_file():
        try:
            with open(path, "ab"):  # appended to later (DuckDB files, key logs); opening changes nothing
                pass
        except OSError as exc:
            raise ToolError(f"cannot write {path}: {exc.strerror or exc}") from None


def _given(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> bool:
    # Defaults are not checked here: a group's options (qreplay's --out) are read for every
    # subcommand too. A default that cannot be written fails when written, in one line (run).
    source = ctx.get_parameter_source(param.name)
    return value is not None and source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def output_file(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """Option callback of a file a command writes or appends to."""
    if _given(ctx, param, value):
        check_writable(Path(value), directory=False)
    return value


def output_dir(ctx: typer.Context, param: typer.CallbackParam, value: Path | None) -> Path | None:
    """Option callback of a directory a command writes into (created if missing)."""
    if _given(ctx, param, value):
        check_writable(Path(value), directory=True)
    return value


def run(app: typer.Typer, prog_name: str) -> None:
    try:
        app(prog_name=prog_name)
    except ToolError as exc:
        print(f"{prog_name}: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except OSError as exc:
        # A named path the machine refused (a default output in a read-only place, a
        # path derived from an output): the environment, not a bug, so one line too.
        if exc.filename is None:
            raise
        print(f"{prog_name}: error: cannot use {exc.filename}: {exc.strerror or exc}", file=sys.stderr)
        sys.exit(1)
    except Exception as exc:
        # A DuckDB file cut short or damaged (copied while written, a disk filled): DuckDB finds it only when a
        # query reaches the missing block, anywhere below, so it is named here, once, in one line. DuckDB is
        # looked up, not imported: --help and the commands that need no store start without it.
        duckdb = sys.modules.get("duckdb")
        if duckdb is None or not isinstance(exc, duckdb.IOException):
            raise
        print(f"{prog_name}: error: cannot read a DuckDB file, damaged or cut short? {first_line(exc)}",
              file=sys.stderr)
        sys.exit(2)  # bad input, as a ToolError


def options_in_place_of(parameter: str, options: Mapping[str, tuple[object, object]],
                        build: Callable[..., object]) -> Callable[[Callable], Callable]:
    """A decorator giving a command the ``options`` (name -> (typer annotation, default)) in place of its
    parameter ``parameter``, which receives ``build(**their values)``: options several commands share,
    declared once."""

    def decorate(command: Callable) -> Callable:
        @functools.wraps(command)
        def with_options(**given):
            built = build(**{name: given.pop(name) for name in options})
            return command(**given, **{parameter: built})

        # typer reads the options from the signature: the command's own, these in place of ``parameter``,
        # whose annotation is left unevaluated, so a command module need not import the class that
        # ``build`` makes (the scan engine's settings, the testbed's link) to be listed in --help
        params = []
        for param in inspect.signature(command).parameters.values():
            if param.name != parameter:
                annotation = param.annotation
                if isinstance(annotation, str):  # evaluated as eval_str would; a parameter that an outer
                    try:                         # decorator of this kind replaces may stay a name
                        annotation = eval(annotation, command.__globals__)
                    except NameError:
                        pass
                params.append(param.replace(kind=inspect.Parameter.KEYWORD_ONLY, annotation=annotation))
                continue
            params += [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=default)
                       for name, (kind, default) in options.items()]
        with_options.__signature__ = inspect.Signature(params)
        with_options.__annotations__ = {p.name: p.annotation for p in params}
        return with_options

    return decorate
