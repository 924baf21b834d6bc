"""Where the CPU goes while `wrk` loads gatekeeper: each process's CPU time per request.

    python tests/perf/cpu_split.py [--workers 1|2] [--batch] [--connections 32] [--log-level info]
                                   [--seconds 5] [--repeat 1]

Starts compare.py's mock upstream, a Redis server and `gatekeeper serve` on the Redis store
(compare.py's "Redis store" rows), loads it with `wrk` at 32 connections (`--connections`), and
prints the requests/s, the p50, the CPU microseconds per request of the workers, the upstream,
Redis and `wrk` (user + system time read from /proc and from `wrk`'s own rusage) and of the whole
machine, and how each CPU spent the run (/proc/stat: user, system, softirq, idle).
`--log-level warning` drops the `request` line (every info line): what writing it costs.
Pinned as compare.py pins: one worker on CPU 1 with the upstream and `wrk` on CPU 0; two workers
on CPUs 0 and 1, sharing them with the upstream and `wrk`. `--batch` runs the upstream and `wrk`
under SCHED_BATCH, as compare.py does for its two-worker row (docs/performance.md says why).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PERF = Path(__file__).resolve().parent
sys.path.insert(0, str(PERF))

import compare  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_times(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) of each named process tree, and of the machine (`machine`)."""
    out = {}
    for name, pid in pids.items():
        total = 0
        for p in compare.tree(pid):
            try:
                fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += int(fields[11]) + int(fields[12])
        out[name] = total / TICK
    busy = sum(sum(ticks) - ticks[3] - ticks[4] for ticks in cpu_states().values())  # all but idle, iowait
    out["machine"] = busy / TICK
    return out


STATES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_states() -> dict[str, list[int]]:
    """Each CPU's ticks in each of STATES, from /proc/stat."""
    out = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *ticks = line.split()
        if name.startswith("cpu") and name != "cpu":
            out[name] = [int(t) for t in ticks[: len(STATES)]]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, choices=(1, 2), default=1)
    parser.add_argument("--batch", action="store_true", help="the upstream and wrk under SCHED_BATCH")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--log-level", choices=("info", "warning"), default="info")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if args.connections < 1 or args.seconds < 1 or args.repeat < 1:
        parser.error("--connections, --seconds and --repeat take a whole number of at least 1")
    if shutil.which("wrk") is None:
        raise SystemExit("needs wrk (Debian's package)")
    redis_bin = compare.redis_binary()
    if redis_bin is None or (os.cpu_count() or 1) < 2:
        raise SystemExit("needs redis-server and 2 cores")
    workdir = Path(tempfile.mkdtemp(prefix="gk-cpu-split-"))
    up_port = compare.free_port()
    batch = ["chrt", "--batch", "0"] if args.batch else []
    mock = compare.Target(
        "upstream", [*batch, sys.executable, str(PERF / "mock_upstream.py"), "--port", str(up_port)], up_port
    )
    redis_port = compare.free_port()
    redis = subprocess.Popen(
        [redis_bin, "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    port = compare.free_port()
    gk = compare.Target("gatekeeper", [], port)
    try:
        mock.start(workdir, "0", 10)
        while not compare.redis_ready(redis_port):
            time.sleep(0.05)
        config = compare.seed_gatekeeper(
            workdir,
            f"http://127.0.0.1:{up_port}/v1",
            "gk",
            store=f"redis://127.0.0.1:{redis_port}/0",
            extra={"log_level": args.log_level},
        )
        gk.command = [str(Path(sys.executable).parent / "gatekeeper"), "serve", "--config", str(config)]
        gk.command += ["--port", str(port)] + (["--workers", "2"] if args.workers == 2 else [])
        gk.start(workdir, "0,1" if args.workers == 2 else "1", 120)
        if gk.error or mock.error:
            raise SystemExit(gk.error or mock.error)
        body, script = compare.load_files(workdir)
        load_cpu = "0" if args.workers == 1 else None  # two workers: wrk shares both cores with them
        compare.run_load(gk.url, body, args.connections, 1, load_cpu, script, batch=args.batch)  # warm-up
        pids = {"gatekeeper": gk.process.pid, "upstream": mock.process.pid, "redis": redis.pid}
        for _ in range(args.repeat):
            before, cpus_before = cpu_times(pids), cpu_states()
            started = os.times()
            result = compare.run_load(gk.url, body, args.connections, args.seconds, load_cpu, script, batch=args.batch)
            ended = os.times()
            after, cpus_after = cpu_times(pids), cpu_states()
            n = result["requests"]
            wrk_s = (ended.children_user - started.children_user) + (ended.children_system - started.children_system)
            per = {name: (after[name] - before[name]) * 1e6 / n for name in after} | {"wrk": wrk_s * 1e6 / n}
            shown = ", ".join(f"{name} {us:.0f}" for name, us in per.items())
            print(
                f"workers {args.workers}{' batch' if args.batch else ''}, {args.connections} connections, "
                f"log {args.log_level}: {result['rps']:,.0f} req/s, p50 {result['p50_ms']:.3f} ms; "
                f"CPU us a request: {shown}"
            )
            for cpu, ticks in cpus_after.items():
                spent = [a - b for a, b in zip(ticks, cpus_before[cpu], strict=True)]
                total = sum(spent) or 1
                print(
                    f"  {cpu}: "
                    + ", ".join(f"{name} {100 * t / total:.0f} %" for name, t in zip(STATES, spent, strict=True))
                )
    finally:
        gk.stop()
        mock.stop()
        os.killpg(redis.pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
