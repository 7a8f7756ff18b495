"""Where the engine's client CPU goes: a sampling profile of handshakes against gtlsserver on loopback.

cProfile charges its own overhead to every Python call (it doubles the share
of small functions) and by default counts wall time, so a sendto that wakes
a server looks expensive. This samples the Python stack on CPU time instead
(ITIMER_PROF, every 0.5 ms of CPU): a C call counts to the Python function
that made it. The engine runs in this process (one worker), as
bench_handshakes' in-process contender does.

    .venv/bin/python bench/profile_handshakes.py [--count 5000] [--top 30]
"""

from __future__ import annotations

import argparse
import collections
import signal
import sys
import time
from pathlib import Path
from types import FrameType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_handshakes import add_server_arguments, gtlsservers  # noqa: E402  (bench/, the script's own directory)
from scanner.engine import OK, ScanSettings, scan_targets  # noqa: E402
from scanner.targets import Target  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_arguments(parser, 5000, "handshakes", 24533)
    parser.add_argument("--top", type=int, default=30, help="rows of each table")
    args = parser.parse_args()
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    samples = 0

    def sample(signum: int, frame: FrameType | None) -> None:
        nonlocal samples
        samples += 1
        seen = set()
        leaf = True
        while frame is not None:
            name = f"{Path(frame.f_code.co_filename).name}:{frame.f_code.co_name}"
            if leaf:
                own[name] += 1
                leaf = False
            if name not in seen:
                inclusive[name] += 1
                seen.add(name)
            frame = frame.f_back

    with gtlsservers(args.servers, args.port) as addresses:
        targets = [Target(*addresses[n % len(addresses)]) for n in range(args.count)]
        records: list = []
        signal.signal(signal.SIGPROF, sample)
        signal.setitimer(signal.ITIMER_PROF, 0.0005, 0.0005)
        cpu = time.process_time()
        scan_targets(targets, ScanSettings(rate=0, concurrency=256, timeout=10, workers=1), records.extend)
        cpu = time.process_time() - cpu
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
    completed = sum(r.status == OK for r in records)
    print(f"{completed} of {args.count} handshakes completed, client CPU {cpu / max(1, completed) * 1000:.3f} ms each, "
          f"{samples} samples")  # fmt: skip
    for title, counts in (("own (C calls count to their Python caller)", own), ("inclusive", inclusive)):
        print(f"--- {title}")
        for name, count in counts.most_common(args.top):
            print(f"{100 * count / max(1, samples):5.1f}%  {name}")


if __name__ == "__main__":
    main()
