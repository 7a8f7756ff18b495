"""The command line every program of ours takes, in every language: the contract, written once.

Our programs are the lab's servers (Rust, Go, Java, Python) and qreplay's clients and servers (Rust, Go,
Python). Each has a *role*, and every program of a role takes exactly the role's options, each by one
spelling: ``--`` and its name with dashes (``--initial-max-data``, ``--qlog-dir``), the address first and
bare (``ip:port``, ``[v6]:port``), values written ``--name=value`` (a switch alone: ``--retry``). A
transport parameter's option is its RFC 9000 name with dashes. In data (Python, JSON, the stores) an
option keeps its snake_case name: ``timeout_s`` is ``RunOptions.timeout_s`` and ``--timeout-s``.

A program accepts every option of its role and refuses, in one line and with status 2, a value its
library cannot honour (``quiche lets no application choose --cid-length``); what each library can honour
is its caller's knowledge (tparams.libraries' ``offered``, a replay stack's ``settable``). The callers render
argv with ``arguments``; the Python programs build their parser with ``parser``; the Rust, Go and Java
programs declare the same names, and tests/test_program_cli.py holds every built program to this module.
Pure data and functions, no I/O: the picoquic server imports it from its own environment.
"""

from __future__ import annotations

import argparse
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from tparams.knobs import KNOBS
from tparams.paramset import PERFORMANCE_PARAMETERS

Kind = Literal["address", "path", "integer", "seconds", "switch", "boolean", "list", "choice", "text"]


@dataclass(frozen=True)
class Option:
    """One option: its name in data, what its value is, and what it means."""

    name: str  # snake_case
    kind: Kind
    help: str
    required: bool = False
    choices: tuple[str, ...] = ()

    @property
    def positional(self) -> bool:
        return self.kind == "address"

    @property
    def flag(self) -> str:
        """How a command line spells it (the address, which is positional, has no flag)."""
        return "" if self.positional else "--" + self.name.replace("_", "-")


def _parameter(name: str) -> Option:
    if name == "disable_active_migration":
        return Option(name, "switch", "send disable_active_migration")
    unit = " (milliseconds)" if name in ("max_idle_timeout", "max_ack_delay") else ""
    return Option(name, "integer", f"transport parameter {name}{unit}; absent: the library's own value")


OPTIONS: dict[str, Option] = {option.name: option for option in (
    Option("listen", "address", "UDP address to listen on, ip:port", required=True),
    Option("connect", "address", "the server's UDP address, ip:port", required=True),
    Option("cert", "path", "PEM certificate chain", required=True),
    Option("key", "path", "PEM private key (PKCS#8)", required=True),
    # a qreplay client's request
    Option("size", "integer", "bytes each request moves (a GET's response body, a PUT's body)", required=True),
    Option("timeout_s", "seconds", "give up (exit 1) after this many seconds (default 600)"),
    # a qreplay client's workload (tparams.workloads: the replay protocol)
    Option("direction", "choice", "down: GET, the server sends (default); up: PUT, the client sends",
           choices=("down", "up")),
    Option("requests", "integer", "requests on the one connection, each of --size bytes (default 1)"),
    Option("concurrency", "integer", "requests open at once, each on its own stream (default 1)"),
    Option("bitrate", "integer", "bits per second a stream is paced at by the server and played at (required)",
           required=True),
    # what both ends of a qreplay run take besides the transport parameters: the knobs (tparams.knobs)
    *(Option(knob.name, knob.kind, knob.help, choices=knob.choices) for knob in KNOBS.values() if knob.program_option),
    Option("keylog", "path", "append the TLS secrets in NSS key log format (what tshark reads) to this file"),
    Option("qlog_dir", "path", "write qlog files into this directory"),
    # what a lab server's application chooses beside flow control (lab.kinds.APPLICATION_CHOICES)
    Option("alpn", "list", "ALPN protocols accepted, in preference order, comma-separated (default h3)"),
    Option("cid_length", "integer", "length in bytes of the server's connection IDs"),
    Option("datagrams", "boolean", "true or false: accept DATAGRAM frames (send max_datagram_frame_size)"),
    Option("preferred_address", "text", "send a preferred_address (ip:port) for the client to move to"),
    Option("retry", "switch", "answer every new connection with a Retry"),
    # one program's own
    Option("mode", "text", "how the server is broken (lab/broken_server.py MODES)", required=True),
    Option("zone", "path", "the JSON zone file to answer from", required=True),
    *(_parameter(name) for name in PERFORMANCE_PARAMETERS),
)}

#: the parameters every lab server takes: the idle timeout and flow control
FLOW_CONTROL = ("max_idle_timeout", *(name for name in PERFORMANCE_PARAMETERS if name.startswith("initial_max_")))
APPLICATION = ("alpn", "cid_length", "datagrams", "disable_active_migration", "active_connection_id_limit",
               "preferred_address", "retry")
REPLAY = (*(name for name, knob in KNOBS.items() if knob.program_option), "keylog", "qlog_dir",
          *PERFORMANCE_PARAMETERS)

Role = Literal["lab-server", "replay-server", "replay-client", "replay-stream-client", "broken-server", "resolver"]
#: each role's options, the address first
ROLES: dict[str, tuple[str, ...]] = {
    # lab/servers/common (Rust), lab/servers/golab (Go), lab/servers/java-common (Java), lab/aioquic_server.py
    "lab-server": ("listen", "cert", "key", *FLOW_CONTROL, *APPLICATION),
    # lab/servers/common/src/replay.rs, replay/quicgo/bulk, replay/aioquic_endpoints
    "replay-server": ("listen", "cert", "key", *REPLAY),
    "replay-client": ("connect", "size", "timeout_s", "direction", "requests", "concurrency", *REPLAY),
    # a replay client that plays a stream (tparams.workloads' stream): replay/aioquic_endpoints/stream_client
    "replay-stream-client": ("connect", "size", "timeout_s", "bitrate", *REPLAY),
    "broken-server": ("listen", "cert", "key", "mode"),
    "resolver": ("listen", "zone"),
}


def address(ip: str, port: int) -> str:
    """``ip:port``, an IPv6 address in brackets."""
    return f"[{ip}]:{port}" if ipaddress.ip_address(ip).version == 6 else f"{ip}:{port}"


def split_address(text: str) -> tuple[str, int]:
    """``ip:port`` (or ``[v6]:port``) as (ip, port); ValueError if it is not one."""
    host, colon, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not colon or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"not an ip:port: {text!r}")
    return str(ipaddress.ip_address(host)), int(port)


def arguments(role: Role, values: Mapping[str, object]) -> list[str]:
    """The command line (after the program) giving ``values``, by their snake_case names: the address
    first, then ``--name=value`` for each value that is not None (a switch only when true).

    A name the role does not take, or a choice it does not offer, is a ValueError: the caller's mistake."""
    taken = ROLES[role]
    unknown = [name for name in values if name not in taken]
    if unknown:
        raise ValueError(f"a {role} takes no {', '.join(unknown)}")
    ordered = sorted(values.items(), key=lambda item: not OPTIONS[item[0]].positional)
    return [word for name, value in ordered if value is not None for word in _render(OPTIONS[name], value)]


def _render(option: Option, value: object) -> list[str]:
    if option.kind == "switch":
        return [option.flag] if value else []
    if option.kind == "boolean":
        text = str(bool(value)).lower()
    elif option.kind == "list":
        text = ",".join(map(str, value))  # type: ignore[call-overload]
    elif option.kind == "integer":
        text = str(int(value))  # type: ignore[call-overload]
    elif option.kind == "seconds":
        text = f"{float(value):g}"  # type: ignore[arg-type]
    else:
        text = str(value)
    if option.choices and text not in option.choices:
        raise ValueError(f"{option.flag} takes {', '.join(option.choices)}, not {text!r}")
    return [text] if option.positional else [f"{option.flag}={text}"]


def parser(role: Role, description: str) -> argparse.ArgumentParser:
    """An argument parser of exactly the role's options, for a Python program (no abbreviations,
    so that each option has one spelling). Values absent from the command line are None (a switch: False)."""
    out = _Parser(description=description, allow_abbrev=False)
    for name in ROLES[role]:
        option = OPTIONS[name]
        if option.positional:
            out.add_argument(name, type=_address, metavar="ip:port", help=option.help)
            continue
        spec: dict = {"dest": name, "help": option.help, "required": option.required}
        if option.kind == "switch":
            spec |= {"action": "store_true"}
        else:
            spec |= {"metavar": _METAVAR[option.kind], "type": _PARSE.get(option.kind, str)}
            if option.choices:
                spec |= {"choices": option.choices, "metavar": "|".join(option.choices)}
        out.add_argument(option.flag, **spec)
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, as the Rust, Go and Java programs refuse
        self.exit(2, f"{self.prog}: error: {message} (--help lists the options)\n")


def _address(text: str) -> tuple[str, int]:
    try:
        return split_address(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _boolean(text: str) -> bool:
    if text not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"true or false, not {text!r}")
    return text == "true"


_PARSE = {"integer": int, "seconds": float, "boolean": _boolean, "list": lambda text: text.split(",")}
_METAVAR = {"path": "PATH", "integer": "N", "seconds": "SECONDS", "boolean": "true|false", "list": "A,B,...",
            "choice": "", "text": "TEXT"}


def given(values: Mapping[str, object], names: Iterable[str]) -> list[str]:
    """The flags of ``names`` that ``values`` (a parsed command line) gives: not None, a switch not False."""
    return [OPTIONS[name].flag for name in names if values.get(name) not in (None, False)]


def refuse_unsupported(out: argparse.ArgumentParser, values: Mapping[str, object], library: str,
                       role: Role, supported: Iterable[str]) -> None:
    """Exit with status 2 and one line when ``values`` give an option of ``role`` beside ``supported``
    (and the address, which every program takes): what the Rust and Go programs do too."""
    ignored = set(supported) | {name for name in ROLES[role] if OPTIONS[name].positional or OPTIONS[name].required}
    refused = given(values, [name for name in ROLES[role] if name not in ignored])
    if refused:
        out.exit(2, f"error: {library} cannot take {', '.join(refused)}\n")
