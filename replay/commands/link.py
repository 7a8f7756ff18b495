"""`qreplay calibrate` and `qreplay doctor`: what the link backends achieve and which work here.

`doctor` collects rows from registered providers; this module registers the
link-backend rows, and other modules (e.g. the stacks) add theirs with
``register_doctor_rows(provider)``, a function returning DoctorRow items.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import typer
from rich.table import Table

from common.terminal import cli_console


@dataclass(frozen=True)
class DoctorRow:
    kind: str  # "link backend", "stack", ...
    name: str
    ok: bool
    detail: str  # what it uses, or why it does not work here


DOCTOR_PROVIDERS: list[Callable[[], Iterable[DoctorRow]]] = []


def register_doctor_rows(provider: Callable[[], Iterable[DoctorRow]]) -> None:
    if provider not in DOCTOR_PROVIDERS:
        DOCTOR_PROVIDERS.append(provider)


def link_backend_rows() -> list[DoctorRow]:
    from replay.link import AUTO_ORDER, BACKENDS
    rows = [DoctorRow("link backend", name, *_availability(name)) for name in BACKENDS]
    chosen = next((r.name for r in rows if r.ok and r.name in AUTO_ORDER), None)
    rows.append(DoctorRow("link backend", "auto", chosen is not None,
                          f"uses {chosen}" if chosen else "no backend works here"))
    return rows


def _availability(name: str) -> tuple[bool, str]:
    from replay.link import BACKENDS
    available = BACKENDS[name].availability()
    return available.ok, available.reason


def machine_rows() -> list[DoctorRow]:
    from replay import cpuidle
    return [DoctorRow("machine", "CPU idle", *cpuidle.availability())]


register_doctor_rows(link_backend_rows)
register_doctor_rows(machine_rows)


def doctor_rows() -> list[DoctorRow]:
    return [row for provider in DOCTOR_PROVIDERS for row in provider()]


def register(app: typer.Typer) -> None:
    @app.command(epilog="Example: qreplay doctor --json")
    def doctor(
        as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON instead of a table."),
    ) -> None:
        """Say which link backends (and stacks) work on this machine, and why not."""
        rows = doctor_rows()
        if as_json:
            print(json.dumps([asdict(r) for r in rows], indent=2))
            return
        table = Table("kind", "name", "works", "detail")
        for r in rows:
            table.add_row(r.kind, r.name, "[green]yes[/]" if r.ok else "[red]no[/]", r.detail)
        cli_console().print(table)

    @app.command(epilog="Example: qreplay calibrate --delay 30ms --rate 1gbit --loss 1%")
    def calibrate(
        backend: str = typer.Option("auto", "--backend", "--link", help="Link backend: auto, netem or relay."),
        delay: str = typer.Option("0ms", help="Added one-way delay server->client, e.g. 30ms."),
        delay_up: str = typer.Option("0ms", help="Added one-way delay client->server."),
        jitter: str = typer.Option("0ms", help="Jitter of the server->client delay (order is kept)."),
        loss: str = typer.Option("0%", help="Bernoulli loss server->client, e.g. 1%."),
        gilbert: str = typer.Option(None, help="Gilbert-Elliott loss as P,R[,LOSS_BAD[,LOSS_GOOD]] percents."),
        rate: str = typer.Option(None, help="Rate limit server->client, e.g. 1gbit, 50mbit."),
        rate_up: str = typer.Option(None, "--rate-up", help="Rate limit client->server, e.g. 50mbit (the bulk "
                                                                    "transfer measures server->client's)."),
        queue: str = typer.Option(None, help="Queue limit: packets (1000) or bytes (256kb); "
                                             "default max(1000 packets, one bandwidth-delay product)."),
        pings: int = typer.Option(2000, min=10, help="UDP echo samples for RTT and loss."),
        ping_interval: str = typer.Option("1ms", help="Gap between echo samples."),
        seconds: float = typer.Option(4.0, min=2.0, help="Length of the UDP bulk transfer for the rate."),
        no_rate: bool = typer.Option(False, "--no-rate", help="Skip the bulk transfer (RTT and loss only)."),
        shallow_idle: bool = typer.Option(True, "--shallow-idle/--deep-idle",
                                          help="Hold the CPUs in their shallowest idle state, as qreplay does."),
        udp_buffer: str = typer.Option("1664KiB", "--udp-buffer", help="UDP socket buffer size, as qreplay's."),
        as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    ) -> None:
        """Measure the RTT, loss and rate a link backend actually achieves against what was configured."""
        from replay.link import GilbertElliott, LinkConfig, parse_duration_ms, parse_percent, parse_rate_bps, parse_size
        from replay.testbed import calibrate as run_calibration

        config = LinkConfig(
            delay_down_ms=parse_duration_ms(delay), delay_up_ms=parse_duration_ms(delay_up, "delay-up"),
            jitter_ms=parse_duration_ms(jitter, "jitter"), loss_pct=parse_percent(loss),
            gilbert=GilbertElliott.parse(gilbert) if gilbert else None,
            rate_bps=parse_rate_bps(rate) if rate else None, queue=queue,
            rate_up_bps=parse_rate_bps(rate_up) if rate_up else None)
        with cli_console(stderr=True).status(f"calibrating {backend}: {config.describe()}"):
            result = run_calibration(config, backend, pings=pings,
                                     ping_interval_ms=parse_duration_ms(ping_interval, "ping interval"),
                                     rate_seconds=seconds, measure_throughput=not no_rate,
                                     shallow_idle=shallow_idle, buffer_bytes=parse_size(udp_buffer, "--udp-buffer"))
        if as_json:
            print(json.dumps(result.as_dict(), indent=2))
            return
        table = Table("quantity", "configured", "measured", "note",
                      title=f"{result.backend}: {config.describe()}")
        for row in result.rows():
            table.add_row(*row)
        cli_console().print(table)

