"""`qscan lab up|down|status`: the local Internet of QUIC servers the tests and the demo use."""

from __future__ import annotations

import json

import typer
from rich.table import Table

import lab as lab_api
from common.cliapp import add_group
from common.terminal import cli_console

INSTANCE_HELP = "Lab instance name: namespaces are called <instance>-*, state lives in /run/<instance>."


def register(app: typer.Typer) -> None:
    group = add_group(app, "lab", "Bring the lab (QUIC servers in network namespaces on 198.18.0.0/15) up or down.",
                      "qscan lab up")

    @group.command("up", epilog="Example: qscan lab up --json")
    def up_command(
        instance: str = typer.Option(lab_api.DEFAULT_INSTANCE, help=INSTANCE_HELP),
        json_output: bool = typer.Option(False, "--json", help="Print the lab's state as JSON."),
    ) -> None:
        """Start the lab and leave it running (refused if it is already up); waits until every server answers."""
        lab_api.up(instance=instance)
        _show(lab_api.status(instance), json_output)

    @group.command("down", epilog="Example: qscan lab down --instance qpop")
    def down_command(instance: str = typer.Option(lab_api.DEFAULT_INSTANCE, help=INSTANCE_HELP)) -> None:
        """Stop every server and delete every lab namespace, also leftovers of a crashed run. Idempotent."""
        removed = lab_api.down(instance)
        typer.echo(f"lab {instance} down ({len(removed)} namespaces removed)")

    @group.command("status", epilog="Example: qscan lab status --json")
    def status_command(
        instance: str = typer.Option(lab_api.DEFAULT_INSTANCE, help=INSTANCE_HELP),
        json_output: bool = typer.Option(False, "--json", help="Print the state as JSON (null when down)."),
    ) -> None:
        """What runs where: namespace, server, kind, address, pid and whether it is alive."""
        _show(lab_api.status(instance), json_output)


    @group.command("population", epilog="Example: qscan lab population --block 198.18.64.0/18 --clients 4")
    def population_command(
        block: str = typer.Option("198.18.64.0/18", help="Address block of the population, inside 198.18.0.0/15."),
        clients: int = typer.Option(4, help="Shard client namespaces (<instance>-shard<i>), one per campaign host."),
        instance: str = typer.Option("qpop", help=INSTANCE_HELP),
        json_output: bool = typer.Option(False, "--json", help="Print the population's layout as JSON."),
    ) -> None:
        """Start a lab whose address block answers as that many hosts (QUIC, garbage, ICMP-closed, silent); stays up."""
        from lab.population import Population, bring_up

        population = Population(block)
        bring_up(population, clients, instance)
        layout = population.to_dict() | {"instance": instance, "responsive": len(population.responsive()),
                                         "clients": clients}
        if json_output:
            typer.echo(json.dumps(layout, indent=2))
            return
        for part in layout["parts"]:
            typer.echo(f"{part['cidr']:<18} {part['behaviour']:<8} {part['name']:<8} {part['addresses']:>9,} addresses")
        typer.echo(f"population lab {instance} up: {layout['responsive']:,} QUIC addresses of {block}, "
                   f"{clients} shard namespaces {instance}-shard0..{clients - 1}; `qscan lab down --instance {instance}`")


def _show(state: dict | None, json_output: bool) -> None:
    if json_output:
        typer.echo(json.dumps(state, indent=2))
        return
    console = cli_console()
    if state is None:
        console.print("lab is down")
        return
    if "servers" not in state:
        console.print(f"lab {state['instance']} is down but left namespaces behind: "
                      f"{', '.join(state['leftover_namespaces'])}; `qscan lab down` removes them")
        return
    table = Table(title=f"lab {state['instance']} (up since {state['started_at']}, client namespace "
                        f"{state['client_namespace']} at {state['addresses']['client']})")
    for column in ("namespace", "server", "kind", "library", "address:port", "sni", "pid", "alive"):
        table.add_column(column)
    for server in state["servers"]:
        address = f"{server['ip']}:{server['port']}" + (" udp+tcp" if server["serves_tcp"] else "")
        table.add_row(server["namespace"], server["name"], server["kind"], server["library"], address,
                      server["sni"], str(server["pid"]), "yes" if server["alive"] else "[red]NO[/red]")
    console.print(table)
    resolver = state.get("resolver")
    if resolver:
        console.print(f"resolver (DNS for *.{lab_api.LAB_DOMAIN}): {resolver['ip']}:{resolver['port']} in "
                      f"{resolver['namespace']}, pid {resolver['pid']}, "
                      f"{'alive' if resolver['alive'] else '[red]NOT ALIVE[/red]'}")
    addresses = state["addresses"]
    console.print(f"UDP-closed hosts: {', '.join(addresses['closed_hosts'])}; silent: {addresses['silent_range']}; "
                  f"no route outside {addresses['lab_range']}")
