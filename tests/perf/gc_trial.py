"""What the cycle collector costs `gatekeeper serve`, with and without `settle_heap`.

    python tests/perf/gc_trial.py [--rounds 4]

Three `gatekeeper serve` processes on the same config and the instant mock upstream (compare.py's),
each run by gc_serve.py: `python` (the collector as Python sets it up), `frozen` (`gc.freeze()`
after start-up only) and `shipped` (freeze and the serving threshold, `settle_heap`). Interleaved
rounds, the server on CPU 1, the upstream and `wrk` on CPU 0, the others paused. Each round:
2 s of warm-up, 4 s at 32 connections (req/s) and 3 s at 1 (p50), with the collector's time and
runs counted over the 32-connection part. Needs `wrk` (Debian's package).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PERF = Path(__file__).resolve().parent
sys.path.insert(0, str(PERF))

import compare  # noqa: E402

VARIANTS = ("python", "frozen", "shipped")


def wrk(url: str, script: Path, connections: int, seconds: int) -> dict:
    out = subprocess.run(
        ["taskset", "-c", "0", "wrk", "-t", str(min(2, connections)), "-c", str(connections), "-d", f"{seconds}s"]
        + ["-s", str(script), url],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.split("RESULT ", 1)[1].splitlines()[0])


def gc_stats(log: Path) -> dict:
    lines = [line for line in log.read_text().splitlines() if line.startswith("GCSTATS ")]
    return json.loads(lines[-1].split(" ", 1)[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    if shutil.which("wrk") is None or shutil.which("taskset") is None:
        raise SystemExit("needs wrk and taskset (apt-get install wrk util-linux)")
    workdir = Path(tempfile.mkdtemp(prefix="gk-gc-"))
    port = compare.free_port()
    upstream = subprocess.Popen(
        ["taskset", "-c", "0", sys.executable, str(PERF / "mock_upstream.py"), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    servers: dict[str, tuple[subprocess.Popen, str, Path]] = {}
    try:
        config = compare.seed_gatekeeper(workdir, f"http://127.0.0.1:{port}/v1", "gk")
        _, script = compare.load_files(workdir)
        for variant in VARIANTS:
            server_port = compare.free_port()
            log = workdir / f"{variant}.log"
            process = subprocess.Popen(
                ["taskset", "-c", "1", sys.executable, str(PERF / "gc_serve.py"), "serve"]
                + ["--config", str(config), "--port", str(server_port)],
                env=os.environ | {"GK_GC_VARIANT": variant},
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            servers[variant] = (process, f"http://127.0.0.1:{server_port}/v1/chat/completions", log)
        time.sleep(8)  # start-up, on one core each
        for process, _, _ in servers.values():
            process.send_signal(signal.SIGSTOP)
        rows: dict[str, list[tuple[float, float, list[float], list[int]]]] = {v: [] for v in VARIANTS}
        for round_ in range(args.rounds):
            for variant in VARIANTS if round_ % 2 == 0 else VARIANTS[::-1]:
                process, url, log = servers[variant]
                process.send_signal(signal.SIGCONT)
                wrk(url, script, 32, 2)
                process.send_signal(signal.SIGUSR1)
                time.sleep(0.3)
                before = gc_stats(log)
                loaded = wrk(url, script, 32, 4)
                process.send_signal(signal.SIGUSR1)
                time.sleep(0.3)
                after = gc_stats(log)
                single = wrk(url, script, 1, 3)
                process.send_signal(signal.SIGSTOP)
                rps = loaded["requests"] / loaded["duration_us"] * 1e6
                ms = [a - b for a, b in zip(after["ms"], before["ms"], strict=True)]
                runs = [a - b for a, b in zip(after["runs"], before["runs"], strict=True)]
                rows[variant].append((rps, single["p50_us"] / 1e3, ms, runs))
                print(
                    f"round {round_ + 1} {variant}: {rps:.0f} req/s c=32, p50 c=1 {single['p50_us'] / 1e3:.2f} ms, "
                    f"collector {ms} ms, runs {runs}",
                    file=sys.stderr,
                    flush=True,
                )
    finally:
        for process, _, _ in servers.values():
            process.send_signal(signal.SIGCONT)
            process.terminate()
        upstream.terminate()
    base = statistics.median(r[0] for r in rows["python"])
    print(f"\n{args.rounds} rounds, median; the collector's figures are per 1,000 requests at 32 connections\n")
    print(
        "| variant | req/s c=32 | ÷ python | p50 ms c=1 | collector ms / 1k requests (gen 0, 1, 2) | runs / 1k requests (gen 0, 1, 2) |"
    )
    print("|---|---:|---:|---:|---|---|")
    for variant, results in rows.items():
        rps = statistics.median(r[0] for r in results)
        p50 = statistics.median(r[1] for r in results)
        per_k = [sum(r[2][g] for r in results) / sum(r[0] * 4 for r in results) * 1e3 for g in range(3)]
        runs_k = [sum(r[3][g] for r in results) / sum(r[0] * 4 for r in results) * 1e3 for g in range(3)]
        print(
            f"| {variant} | {rps:.0f} | {rps / base:.2f}x | {p50:.2f} | "
            f"{', '.join(f'{x:.1f}' for x in per_k)} | {', '.join(f'{x:.2f}' for x in runs_k)} |"
        )


if __name__ == "__main__":
    main()
