"""docs/results.md's "Where does each stack spend its cycles?": a profiled results file as one figure and a Markdown table.

Per stack (its own client and server) and delay: goodput; each endpoint's CPU seconds per GB of payload
and its two largest components; the CPU bound that follows (one core per endpoint: an endpoint that needs
S CPU seconds a GB cannot move more than 8/S Gbit/s); the system calls the sampled stacks were in.

    qreplay matrix --stacks ngtcp2,quic-go,... --sets firefox --delays 0,30 --size 300MB --reps 3 --profile --out cycles.duckdb
    .venv/bin/python scripts/where_cycles_go.py cycles.duckdb --figure docs/figures/cycles_per_gb.png
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from replay import statistics, store  # noqa: E402
from replay.commands.plot import components_figure  # noqa: E402

SHOWN_SYSCALLS = ("sendmsg", "sendmmsg", "sendto", "recvmsg", "recvmmsg", "recvfrom", "write", "epoll_wait",
                  "epoll_pwait", "ppoll", "futex", "nanosleep")


def table(results: Path) -> str:
    con = store.open_read_only(results)
    try:
        summary = con.sql(statistics.profile_summary_sql(statistics.present_conditions(con))).pl()
        syscalls = con.sql("""
            SELECT r.stack, r.delay_ms, s.endpoint, s.syscall, sum(s.samples) / sum(sum(s.samples))
                   OVER (PARTITION BY r.stack, r.delay_ms, s.endpoint) AS share
            FROM profile_syscalls s JOIN runs r USING (run_id) GROUP BY 1, 2, 3, 4""").pl()
    finally:
        con.close()
    lines = ["| stack | delay | goodput (Mbit/s) | endpoint | CPU s/GB | bound (Gbit/s) | largest components "
             "| system calls (share of the samples in one) |", "|---|---|---|---|---|---|---|---|"]
    for key, group in summary.group_by("stack", "delay_ms", "endpoint", maintain_order=True):
        stack, delay, endpoint = key
        total = group["mean_cpu_s_per_gb"].sum()
        top = group.sort("mean_share", descending=True).head(3)
        parts = ", ".join(f"{c} {s * 100:.0f}%" for c, s in zip(top["component"], top["mean_share"]))
        calls = syscalls.filter((syscalls["stack"] == stack) & (syscalls["delay_ms"] == delay)
                                & (syscalls["endpoint"] == endpoint))
        shown = ", ".join(f"{row['syscall']} {row['share'] * 100:.0f}%" for row in
                          calls.sort("share", descending=True).iter_rows(named=True)
                          if row["syscall"] in SHOWN_SYSCALLS and row["share"] >= 0.02)
        lines.append(f"| {stack} | {delay:g} ms | {group['mean_mbps'][0]:,.0f} | {endpoint} | {total:.2f} | "
                     f"{8 / total if total else float('nan'):.1f} | {parts} | {shown or '-'} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--figure", type=Path)
    args = parser.parse_args()
    if args.figure:
        con = store.open_read_only(args.results)
        summary = con.sql(statistics.profile_summary_sql(statistics.present_conditions(con))).pl()
        con.close()
        components_figure(summary, args.figure, "CPU seconds per GB of payload by component")
        print(f"wrote {args.figure}")
    print(table(args.results))


if __name__ == "__main__":
    main()
