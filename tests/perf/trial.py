"""Side-by-side trials for docs/results/perf_compare.md: variants of one forwarder, measured interleaved in one run.

    python tests/perf/trial.py VARIANT [VARIANT ...] [--duration 4] [--rounds 3] [--concurrency 1,32]

Variants (see VARIANTS): the two floors with each server and client, and `gatekeeper serve`'s app
on uvicorn or granian. Same mock upstream, load generator, pinning and pausing as compare.py.
Prints one markdown table: median p50 / req/s / the variant's CPU microseconds per request (its
process alone; with wrk, which counts the requests) per concurrency and stream time to first byte,
with every round's req/s at the highest concurrency so the noise is visible. The granian
variants need `pip install granian` (a trial only: gatekeeper does not depend on it).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

PERF = Path(__file__).resolve().parent
sys.path.insert(0, str(PERF))

import compare  # noqa: E402
from compare import BLOCKED, Target, free_port, measure_stream, run_load  # noqa: E402

PY = sys.executable


def floor(server: str, client: str, framework: str = "starlette") -> Callable[[str, Path, int], list[str]]:
    return lambda upstream, workdir, port: [
        PY,
        str(PERF / "floor.py"),
        "--port",
        str(port),
        "--upstream",
        upstream,
        "--block",
        ",".join(BLOCKED),
        "--server",
        server,
        "--client",
        client,
        "--framework",
        framework,
    ]


def gatekeeper(server: str) -> Callable[[str, Path, int], list[str]]:
    def command(upstream: str, workdir: Path, port: int) -> list[str]:
        config = compare.seed_gatekeeper(workdir, upstream)
        return [PY, str(PERF / "gk_serve.py"), "--config", str(config), "--port", str(port), "--server", server]

    return command


VARIANTS: dict[str, Callable[[str, Path, int], list[str]]] = {
    "floor-asyncio": lambda upstream, workdir, port: [
        PY,
        str(PERF / "floor_asyncio.py"),
        "--port",
        str(port),
        "--upstream",
        upstream,
        "--block",
        ",".join(BLOCKED),
    ],
    "starlette-uvicorn-httpx": floor("uvicorn", "httpx"),
    "starlette-granian-httpx": floor("granian", "httpx"),
    "starlette-uvicorn-aiohttp": floor("uvicorn", "aiohttp"),
    "starlette-granian-aiohttp": floor("granian", "aiohttp"),
    "asgi-uvicorn-aiohttp": floor("uvicorn", "aiohttp", "none"),
    "asgi-granian-aiohttp": floor("granian", "aiohttp", "none"),
    "asgi-uvicorn-raw": floor("uvicorn", "raw", "none"),
    "gatekeeper-uvicorn": gatekeeper("uvicorn"),
    "gatekeeper-granian": gatekeeper("granian"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "variants",
        nargs="+",
        metavar="VARIANT[@SOURCE_TREE]",
        help=f"one of {sorted(VARIANTS)}; `@DIR` runs it with PYTHONPATH=DIR (another checkout)",
    )
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--stream-requests", type=int, default=60)
    parser.add_argument("--env", action="append", default=[], help="NAME=VALUE for every variant (repeatable)")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    concurrency = [int(c) for c in args.concurrency.split(",")]
    pin = (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None
    client_cpu, server_cpu = ("0", "1") if pin else (None, None)
    env = dict(item.split("=", 1) for item in args.env)

    workdir = Path(tempfile.mkdtemp(prefix="gk-trial-"))
    body_file, script = compare.load_files(workdir)
    wrk_script = script if shutil.which("wrk") else None
    upstream_port = free_port()
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    mock = Target(
        "direct", [PY, str(PERF / "mock_upstream.py"), "--port", str(upstream_port), "--gap-ms", "2"], upstream_port
    )
    targets = []
    for i, name in enumerate(args.variants):
        variant, _, tree = name.partition("@")
        if variant not in VARIANTS:
            raise SystemExit(f"unknown variant {variant!r}; known: {sorted(VARIANTS)}")
        port = free_port()
        vdir = workdir / str(i)
        vdir.mkdir()
        targets.append(
            Target(
                name, VARIANTS[variant](upstream, vdir, port), port, env=env | ({"PYTHONPATH": tree} if tree else {})
            )
        )
    results: dict[tuple[str, int], list[dict]] = {}
    ttfb: dict[str, list[float]] = {}
    try:
        mock.start(workdir, client_cpu, 10)
        for t in targets:
            t.start(workdir, server_cpu, 60)
            if t.error:
                raise SystemExit(f"{t.name}: {t.error}")
            t.signal(signal.SIGSTOP)
        for rnd in range(args.rounds):
            order = targets if rnd % 2 == 0 else targets[::-1]  # interleave, and alternate who goes first
            for c in concurrency:
                for t in order:
                    t.signal(signal.SIGCONT)
                    run_load(t.url, body_file, c, args.warmup, client_cpu, wrk_script)
                    before = compare.cpu_s(t.process.pid)
                    r = run_load(t.url, body_file, c, args.duration, client_cpu, wrk_script)
                    # The variant's own CPU per request (its process alone: the upstream and the
                    # load generator are on the other core): is its latency its own work?
                    r["cpu_us"] = (compare.cpu_s(t.process.pid) - before) / max(1, r.get("requests", 0)) * 1e6
                    results.setdefault((t.name, c), []).append(r)
                    print(
                        f"round {rnd + 1} c={c} {t.name}: p50 {r['p50_ms']:.2f} ms {r['rps']:.0f} req/s "
                        f"errors {r['errors']}",
                        file=sys.stderr,
                    )
                    t.signal(signal.SIGSTOP)
            for t in order:
                t.signal(signal.SIGCONT)
                ttfb.setdefault(t.name, []).append(asyncio.run(measure_stream(t.url, args.stream_requests))[0])
                t.signal(signal.SIGSTOP)
        for t in targets:
            t.signal(signal.SIGCONT)
            t.rss_mib = compare.rss_mib(t.process.pid)
    finally:
        for t in targets + [mock]:
            t.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    med = statistics.median
    head = ["variant"] + [f"p50 ms c={c}" for c in concurrency] + [f"req/s c={c}" for c in concurrency]
    head += [f"CPU us/request c={c}" for c in concurrency]
    head += ["TTFB ms", "RSS MiB", "start-up s", f"req/s c={concurrency[-1]} per round"]
    print("| " + " | ".join(head) + " |")
    print("|---" + "|---:" * (len(head) - 1) + "|")
    for t in targets:
        row = [t.name] + [f"{med(r['p50_ms'] for r in results[t.name, c]):.2f}" for c in concurrency]
        row += [f"{med(r['rps'] for r in results[t.name, c]):.0f}" for c in concurrency]
        row += [f"{med(r.get('cpu_us', 0.0) for r in results[t.name, c]):.0f}" for c in concurrency]
        row += [
            f"{med(ttfb[t.name]):.2f}",
            f"{t.rss_mib:.0f}",
            f"{t.startup_s:.2f}",
            " / ".join(f"{r['rps']:.0f}" for r in results[t.name, concurrency[-1]]),
        ]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
