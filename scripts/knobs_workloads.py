"""docs/results.md's "What do the cipher suite, GSO and congestion control change" and "How do the QUIC stacks
fare beside TCP": tables and figures from the results files
that scripts/roundrobin.sh wrote (one qreplay run a condition a round, so each round is its own experiment:
the statistics here are over the runs of a condition, whichever experiment they belong to).

    .venv/bin/python scripts/knobs_workloads.py DIR [--figures docs/figures] [--export datasets/knobs_workloads]

DIR holds the results files cipher.duckdb, cipher-profile.duckdb, gso.duckdb, cc.duckdb, updown.duckdb,
requests.duckdb and clients.duckdb, or their CSV exports (NAME.runs.csv, NAME.profiles.csv: what
datasets/knobs_workloads keeps, since results files stay out of git); those present are used.
CPU per GB is the endpoint's CPU seconds (GNU time: user + system)
over the payload moved, in decimal GB.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import duckdb


NAMES = ("cipher", "cipher-profile", "gso", "cc", "updown", "requests", "clients")
CIPHERS = ["TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"]
KEYS = "stack, delay_ms::int AS delay_ms, workload, requests, concurrency, clients, size_bytes, cc, cipher, gso"
STATS = """count(*) FILTER (status = 'ok') AS n, count(*) FILTER (status <> 'ok') AS failed,
  avg(goodput_mbps) FILTER (status = 'ok') AS mbps, stddev_samp(goodput_mbps) FILTER (status = 'ok') AS sd,
  avg(server_cpu_s / (bytes / 1e9)) FILTER (status = 'ok') AS server_cpu_s_per_gb,
  avg(client_cpu_s / (bytes / 1e9)) FILTER (status = 'ok') AS client_cpu_s_per_gb,
  avg(requests_per_s) FILTER (status = 'ok') AS rps, stddev_samp(requests_per_s) FILTER (status = 'ok') AS rps_sd,
  avg(ttfb_ms) FILTER (status = 'ok') AS ttfb_ms, avg(latency_p50_ms) FILTER (status = 'ok') AS p50_ms,
  avg(latency_p99_ms) FILTER (status = 'ok') AS p99_ms, avg(fairness) FILTER (status = 'ok') AS fairness,
  avg(server_cpu_s / clients) FILTER (status = 'ok') AS server_cpu_s_per_client,
  avg(server_maxrss_kb / clients / 1024) FILTER (status = 'ok') AS server_mib_per_client,
  100.0 * sum(client_udp_drops) FILTER (status = 'ok')
    / nullif(sum(client_udp_drops + client_udp_datagrams) FILTER (status = 'ok'), 0) AS drop_pct,
  min(started_at) AS first, max(started_at) AS last"""


#: what the CSV exports keep of each run (the rest, argv and counters, stays in the DuckDB files)
EXPORTED = """experiment_id, run_id, started_at, set_name, stack, server_stack, link_backend, delay_ms, workload,
  requests, concurrency, clients, size_bytes, udp_buffer_bytes, status, error, bytes, duration_s, goodput_mbps,
  client_goodputs_mbps::VARCHAR AS client_goodputs_mbps, fairness, requests_per_s, ttfb_ms, latency_p50_ms,
  latency_p90_ms, latency_p99_ms, wall_s, handshake_s, client_cpu_s, client_maxrss_kb, server_cpu_s,
  server_maxrss_kb, cc, cc_requested, cipher, cipher_requested, gso, gso_requested, client_udp_drops,
  client_udp_datagrams"""


#: read back as numbers even where a column holds none (a CSV reader would guess text)
NUMERIC = {**dict.fromkeys(("delay_ms", "duration_s", "goodput_mbps", "fairness", "requests_per_s", "ttfb_ms",
                            "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "wall_s", "handshake_s",
                            "client_cpu_s", "server_cpu_s"), "DOUBLE"),
           **dict.fromkeys(("requests", "concurrency", "clients", "size_bytes", "udp_buffer_bytes", "bytes",
                            "client_maxrss_kb", "server_maxrss_kb", "client_udp_drops", "client_udp_datagrams"),
                           "BIGINT")}


def source(directory: Path, name: str):
    """A connection whose views ``runs`` (and ``profiles``, when there are any) are experiment ``name``'s:
    its results file NAME.duckdb when present, else the CSV exports NAME.runs.csv (and NAME.profiles.csv)."""
    con = duckdb.connect()
    database, runs_csv = directory / f"{name}.duckdb", directory / f"{name}.runs.csv"
    if database.exists():
        con.execute(f"ATTACH '{database}' AS src (READ_ONLY)")
        con.execute("""CREATE VIEW runs AS SELECT *,
                         json_extract(counters, '$.client_udp_rcvbuf_errors')::BIGINT AS client_udp_drops,
                         json_extract(counters, '$.client_udp_in_datagrams')::BIGINT AS client_udp_datagrams
                       FROM src.runs""")
        con.execute("CREATE VIEW profiles AS SELECT * FROM src.profiles")
    elif runs_csv.exists():
        types = {**NUMERIC, "started_at": "TIMESTAMP"}
        con.execute(f"CREATE VIEW runs AS SELECT * FROM read_csv('{runs_csv}', header = true, types = {types})")
        profiles_csv = directory / f"{name}.profiles.csv"
        if profiles_csv.exists():
            con.execute(f"CREATE VIEW profiles AS SELECT * FROM read_csv_auto('{profiles_csv}')")
    else:
        return None
    return con


def export(con, directory: Path, name: str) -> None:
    """The runs (and per-component profile rows) as CSV beside the figures' sources, small enough to keep."""
    con.execute(f"COPY (SELECT {EXPORTED} FROM runs ORDER BY started_at) TO '{directory / f'{name}.runs.csv'}' (HEADER)")
    if con.sql("SELECT count(*) FROM profiles").fetchall()[0][0]:
        con.execute(f"COPY (SELECT run_id, endpoint, library, profiler, component, samples, share, cpu_s, cpu_s_per_gb "
                    f"FROM profiles ORDER BY ALL) TO '{directory / f'{name}.profiles.csv'}' (HEADER)")


def conditions(con):
    return con.sql(f"SELECT {KEYS}, {STATS} FROM runs GROUP BY ALL ORDER BY ALL").pl()


def components(con):
    """Per condition, endpoint and component: the mean share and CPU seconds per GB of the profiled runs."""
    return con.sql(f"""SELECT {KEYS}, p.endpoint, p.component, count(*) AS runs, avg(p.share) AS share,
                         avg(p.cpu_s_per_gb) AS cpu_s_per_gb
                       FROM runs r JOIN profiles p USING (run_id) WHERE r.status = 'ok'
                       GROUP BY ALL ORDER BY ALL""").pl()


def when(df) -> str:
    return f"{df['first'].min():%Y-%m-%d %H:%M}-{df['last'].max():%H:%M} UTC"


def short_cipher(name: str | None) -> str:
    return {"TLS_AES_128_GCM_SHA256": "AES-128-GCM", "TLS_AES_256_GCM_SHA384": "AES-256-GCM",
            "TLS_CHACHA20_POLY1305_SHA256": "ChaCha20"}.get(name or "", str(name))


def gso_label(value: bool) -> str:
    return "GSO on" if value else "GSO off"  # stored as what ran: true or false


def cell(mean, sd) -> str:
    return "-" if mean is None else f"{mean:,.0f} ({sd or 0:,.0f})"


def runs(r) -> str:
    return f"{r['n']}" + (f" ({r['failed']} failed)" if r["failed"] else "")


def knob_table(df, knob: str, values: list[str], label=str) -> str:
    """Goodput mean (sd) and server CPU s/GB per stack under each value of ``knob``, and each value's ratio
    against the first."""
    names = [label(v) for v in values]
    ratios_head = " | ".join(f"{name}/{names[0]}" for name in names[1:])
    lines = [f"| stack | {' | '.join(names)} | {ratios_head} | server CPU s/GB ({', '.join(names)}) | "
             "client socket drops % | n |",
             "|---" * (3 + 2 * len(values)) + "|"]
    for stack in sorted(set(df["stack"])):
        rows = {r[knob]: r for r in df.filter(df["stack"] == stack).iter_rows(named=True)}
        got = [rows.get(v) for v in values]
        base = got[0]["mbps"] if got[0] and got[0]["mbps"] else None
        ratios = [f"{g['mbps'] / base:.2f}" if g and g["mbps"] and base else "-" for g in got[1:]]
        cpu = ", ".join(f"{g['server_cpu_s_per_gb']:.2f}" if g and g["server_cpu_s_per_gb"] else "-" for g in got)
        n = "/".join(runs(g) if g else "0" for g in got)
        drops = ", ".join("-" if not g or g["drop_pct"] is None else f"{g['drop_pct']:.2f}" for g in got)
        lines.append(f"| {stack} | {' | '.join(cell(g['mbps'], g['sd']) if g else '-' for g in got)} | "
                     f"{' | '.join(ratios)} | {cpu} | {drops} | {n} |")
    return "\n".join(lines)


def crypto_table(comp) -> str:
    """The profiled cipher runs: CRYPTO's share and CPU s/GB, and the whole endpoint's CPU s/GB."""
    lines = ["| stack | cipher | server CRYPTO share | server CRYPTO s/GB | server all s/GB | client CRYPTO share | client CRYPTO s/GB | client all s/GB |",
             "|---|---|---|---|---|---|---|---|"]
    for (stack, cipher), group in sorted(comp.group_by(["stack", "cipher"]), key=lambda g: (g[0][0], str(g[0][1]))):
        cells = []
        for endpoint in ("server", "client"):
            mine = group.filter(group["endpoint"] == endpoint)
            crypto = mine.filter(mine["component"] == "CRYPTO")
            share = crypto["share"][0] if len(crypto) else 0.0
            s_gb = crypto["cpu_s_per_gb"][0] if len(crypto) else 0.0
            cells += [f"{share:.2f}", f"{s_gb:.2f}", f"{mine['cpu_s_per_gb'].sum():.2f}" if len(mine) else "-"]
        lines.append(f"| {stack} | {short_cipher(cipher)} | {' | '.join(cells)} |")
    return "\n".join(lines)


def updown_table(df) -> str:
    lines = ["| stack | delay | download Mbit/s | upload Mbit/s | upload/download | sender CPU s/GB (down: server, up: client) | n |",
             "|---|---|---|---|---|---|---|"]
    for (stack, delay), group in sorted(df.group_by(["stack", "delay_ms"]), key=lambda g: (g[0][1], g[0][0])):
        rows = {r["workload"]: r for r in group.iter_rows(named=True)}
        down, up = rows.get("download"), rows.get("upload")
        ratio = f"{up['mbps'] / down['mbps']:.2f}" if down and up and down["mbps"] and up["mbps"] else "-"
        cpu = (f"{down['server_cpu_s_per_gb']:.2f} / {up['client_cpu_s_per_gb']:.2f}"
               if down and up and down["server_cpu_s_per_gb"] and up["client_cpu_s_per_gb"] else "-")
        lines.append(f"| {stack} | {delay} ms | {cell(down['mbps'], down['sd']) if down else '-'} | "
                     f"{cell(up['mbps'], up['sd']) if up else '-'} | {ratio} | {cpu} | "
                     f"{down['n'] if down else 0}/{up['n'] if up else 0} |")
    return "\n".join(lines)


def requests_table(df) -> str:
    lines = ["| delay | size | concurrency | stack | requests/s mean (sd) | against tcp-h2 | TTFB ms | p50 ms | p99 ms | n |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for (delay, size, conc), group in sorted(df.group_by(["delay_ms", "size_bytes", "concurrency"]), key=lambda g: g[0]):
        tcp = group.filter(group["stack"] == "tcp-h2")["rps"]
        tcp = tcp[0] if len(tcp) else None
        for r in group.sort("stack").iter_rows(named=True):
            ratio = f"{r['rps'] / tcp:.2f}" if tcp and r["rps"] else "-"
            lines.append(f"| {delay} ms | {size // 1000} KB | {conc} | {r['stack']} | "
                         f"{cell(r['rps'], r['rps_sd'])} | {ratio} | "
                         f"{r['ttfb_ms'] or float('nan'):.2f} | {r['p50_ms'] or float('nan'):.2f} | "
                         f"{r['p99_ms'] or float('nan'):.2f} | {runs(r)} |")
    return "\n".join(lines)


def clients_table(df) -> str:
    lines = ["| delay | stack | clients | per-client Mbit/s mean (sd) | N x per-client | Jain fairness | server CPU s a client | server peak MiB (a client) | n |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in df.sort(["delay_ms", "stack", "clients"]).iter_rows(named=True):
        total = r["mbps"] * r["clients"] if r["mbps"] else None
        fairness = "-" if r["fairness"] is None else f"{r['fairness']:.3f}"  # one client has none
        memory = ("-" if r["server_mib_per_client"] is None else
                  f"{r['server_mib_per_client'] * r['clients']:.1f} ({r['server_mib_per_client']:.1f})")
        lines.append(f"| {r['delay_ms']} ms | {r['stack']} | {r['clients']} | {cell(r['mbps'], r['sd'])} | "
                     f"{'-' if total is None else format(total, ',.0f')} | {fairness} | "
                     f"{r['server_cpu_s_per_client'] or float('nan'):.3f} | {memory} | {runs(r)} |")
    return "\n".join(lines)


#: the Kempf thesis's LSQUIC at 0 ms on a 10 Gbit/s link, 20 runs each (Mbit/s): table 5.3 (AES-128-GCM, AES-NI
#: at both ends); figure 5.3's ChaCha20 "around 2300" (AES-NI off, which ChaCha20 does not use); table 5.4
#: (1664 KiB receive buffer, as here). AES-256-GCM he left out: LSQUIC never chose it
THESIS = {"cipher": {"TLS_AES_128_GCM_SHA256": 2596, "TLS_CHACHA20_POLY1305_SHA256": 2300},
          "cc": {"cubic": 2770, "bbr": 904}}


def knobs_figure(frames: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("cipher", "cipher", CIPHERS, short_cipher),
              ("gso", "gso", [True, False], gso_label),
              ("cc", "cc", ["cubic", "bbr"], str.upper)]
    panels = [p for p in panels if p[0] in frames]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.2), squeeze=False)
    for ax, (name, knob, values, label) in zip(axes[0], panels):
        df = frames[name]
        stacks = sorted(set(df["stack"]))
        thesis = THESIS.get(name, {})
        width = 0.8 / len(values)
        for i, v in enumerate(values):
            sub = {r["stack"]: r for r in df.filter(df[knob] == v).iter_rows(named=True)}
            xs = [j + (i - (len(values) - 1) / 2) * width for j in range(len(stacks))]
            bars = ax.bar(xs, [sub[s]["mbps"] if s in sub and sub[s]["mbps"] else 0 for s in stacks], width,
                          yerr=[sub[s]["sd"] or 0 if s in sub else 0 for s in stacks], capsize=2, label=label(v))
            if v in thesis:  # the thesis's LSQUIC as one more group, hatched
                ax.bar(len(stacks) + (i - (len(values) - 1) / 2) * width, thesis[v], width, hatch="//",
                       color=bars.patches[0].get_facecolor())
        ax.set_xticks(range(len(stacks) + bool(thesis)), stacks + (["LSQUIC\n(thesis)"] if thesis else []),
                      rotation=30, ha="right")
        ax.set_ylabel("goodput, Mbit/s (mean, sd)")
        ax.set_title({"cipher": "cipher suite", "gso": "UDP GSO of the sender", "cc": "congestion control"}[name])
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Kempf's knobs at 0 ms (download, veth, 3 runs a condition)")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def workloads_figure(requests, clients, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    if requests is not None:
        groups = sorted({(r["delay_ms"], r["size_bytes"], r["concurrency"]) for r in requests.iter_rows(named=True)})
        stacks = sorted(set(requests["stack"]))
        width = 0.8 / len(stacks)
        for i, s in enumerate(stacks):
            sub = {(r["delay_ms"], r["size_bytes"], r["concurrency"]): r for r in
                   requests.filter(requests["stack"] == s).iter_rows(named=True)}
            ax.bar([j + (i - (len(stacks) - 1) / 2) * width for j in range(len(groups))],
                   [sub[g]["rps"] if g in sub and sub[g]["rps"] else 0 for g in groups], width, label=s)
        ax.set_xticks(range(len(groups)), [f"{d} ms\n{sz // 1000} KB x{c}" for d, sz, c in groups], fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel("requests/s (mean)")
        ax.set_title("request-response, one connection")
        ax.legend(fontsize=7)
        ax.grid(axis="y", alpha=0.3)
    ax = axes[1]
    if clients is not None:
        colors = {stack: f"C{i}" for i, stack in enumerate(sorted(set(clients["stack"])))}
        for (stack, delay), group in sorted(clients.group_by(["stack", "delay_ms"]), key=lambda g: g[0]):
            g = group.sort("clients")
            ax.errorbar(g["clients"], g["mbps"], yerr=g["sd"].fill_null(0), marker="o", capsize=2, color=colors[stack],
                        linestyle="-" if delay == 0 else "--", label=f"{stack} {delay} ms")
        ax.set_xscale("log", base=2)
        ticks = sorted(set(clients["clients"]))
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.set_yscale("log")
        ax.set_xlabel("clients at once")
        ax.set_ylabel("per-client goodput, Mbit/s (mean, sd)")
        ax.set_title("many clients, 20 MB each")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--figures", type=Path)
    parser.add_argument("--export", type=Path, help="write each experiment's runs (and profiles) as CSV here")
    args = parser.parse_args()
    sources = {name: con for name in NAMES if (con := source(args.dir, name)) is not None}
    if args.export:
        args.export.mkdir(parents=True, exist_ok=True)
        for name, con in sources.items():
            export(con, args.export, name)
    frames = {name: conditions(con) for name, con in sources.items() if name != "cipher-profile"}
    tables = {"cipher": lambda df: knob_table(df, "cipher", CIPHERS, short_cipher),
              "gso": lambda df: knob_table(df, "gso", [True, False], gso_label),
              "cc": lambda df: knob_table(df, "cc", ["cubic", "bbr"]),
              "updown": updown_table, "requests": requests_table, "clients": clients_table}
    for name, df in frames.items():
        print(f"\n## {name} ({when(df)}, {df['n'].sum()} runs ok, {df['failed'].sum()} not)\n")
        print(tables[name](df))
    if "cipher-profile" in sources:
        con = sources["cipher-profile"]
        print(f"\n## cipher, profiled ({when(conditions(con))})\n")
        print(knob_table(conditions(con), "cipher", CIPHERS, short_cipher))
        print()
        print(crypto_table(components(con)))
    if args.figures:
        knobs_figure(frames, args.figures / "kempf_knobs_0ms.png")
        workloads_figure(frames.get("requests"), frames.get("clients"), args.figures / "quicsand_workloads.png")


if __name__ == "__main__":
    main()
