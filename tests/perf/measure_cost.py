"""What a lazy measurement costs the first request: wall time of `gatekeeper serve`'s first answer
for an unmeasured model (`unknown_models: wait`), with the suite run sequentially
(`bench.concurrency: 1`) and at the default concurrency.

    python tests/perf/measure_cost.py scripted [--delay-ms 200]   # scripted upstream, fixed delay per call
    python tests/perf/measure_cost.py local [--rounds 1]          # the real local model (llama_cpp.server)

Each variant starts its own `gatekeeper serve` with an empty store, waits for /healthz, then
times one POST of a chat request (with tools) for a model it has never seen: that request waits
for the whole measurement of its `model@default` pair. The next request's time is printed too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PERF = Path(__file__).resolve().parent
sys.path.insert(0, str(PERF))
sys.path.insert(0, str(PERF.parent))

import loadgen  # noqa: E402
from compare import RULES, free_port, request_body  # noqa: E402

from gatekeeper.config import BenchSettings  # noqa: E402
from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, load_suite  # noqa: E402


def serve(workdir: Path, upstream: str, concurrency: int) -> tuple[subprocess.Popen, str]:
    config = workdir / f"gatekeeper-{concurrency}.yaml"
    config.write_text(
        json.dumps(
            {  # JSON is YAML
                "upstream": {"base_url": upstream, "api_key": "sk-none", "timeout_s": 600},
                "suite": str(DEFAULT_SUITE_DIR),
                "store": str(workdir / f"store-{concurrency}.json"),
                "unknown_models": "wait",
                "wait_timeout_s": 3600,
                "bench": {"concurrency": concurrency},
                "tools": {"default_tier": "small", "required_tier": RULES},
            }
        )
    )
    port = free_port()
    exe = str(Path(sys.executable).parent / "gatekeeper")
    log = open(workdir / f"serve-{concurrency}.log", "wb")  # noqa: SIM115 - the server's log outlives this call
    process = subprocess.Popen(
        [exe, "serve", "--config", str(config), "--port", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while asyncio.run(get_status(f"{url}/healthz")) != 200:
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"gatekeeper serve did not start (see {workdir}/serve-{concurrency}.log)")
        time.sleep(0.05)
    return process, f"{url}/v1/chat/completions"


async def get_status(url: str) -> int | None:
    host, port = url.split("//")[1].split("/")[0].split(":")
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
    except OSError:
        return None
    writer.write(f"GET /{url.split('/', 3)[3]} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n".encode())
    head = await reader.read(64)
    writer.close()
    return int(head[9:12]) if head.startswith(b"HTTP/1.1 ") else None


def first_request(upstream: str, model: str, concurrency: int, workdir: Path) -> tuple[float, float, int | None]:
    process, url = serve(workdir, upstream, concurrency)
    try:
        started = time.perf_counter()
        status = asyncio.run(loadgen.post_once(url, request_body(model=model), timeout=3600))
        first = time.perf_counter() - started
        started = time.perf_counter()
        asyncio.run(loadgen.post_once(url, request_body(model=model), timeout=600))
        following = time.perf_counter() - started
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(20)
    return first, following, status


def run(upstream: str, model: str, rounds: int, label: str) -> None:
    default = BenchSettings().concurrency
    suite = load_suite(DEFAULT_SUITE_DIR)
    times: dict[int, list[tuple[float, float, int | None]]] = {1: [], default: []}
    with tempfile.TemporaryDirectory(prefix="gk-measure-") as tmp:
        for rnd in range(rounds):
            for concurrency in (1, default) if rnd % 2 == 0 else (default, 1):
                workdir = Path(tmp) / f"{rnd}-{concurrency}"
                workdir.mkdir()
                result = first_request(upstream, model, concurrency, workdir)
                times[concurrency].append(result)
                print(
                    f"round {rnd + 1} concurrency {concurrency}: first request {result[0]:.2f} s "
                    f"(HTTP {result[2]}), next {result[1] * 1000:.1f} ms",
                    file=sys.stderr,
                )
    seq = statistics.median(t[0] for t in times[1])
    par = statistics.median(t[0] for t in times[default])
    print(f"{label}: default suite ({len(suite.tests)} tests, one level: model@default), median of {rounds} round(s)")
    print("| bench.concurrency | first request (measures) | next request | the measurement (first - next) |")
    print("|---:|---:|---:|---:|")
    for concurrency in (1, default):
        first = statistics.median(t[0] for t in times[concurrency])
        following = statistics.median(t[1] for t in times[concurrency])
        print(f"| {concurrency} | {first:.2f} s | {following * 1000:.1f} ms | {first - following:.2f} s |")
    print(f"speed-up of the default concurrency over sequential: {seq / par:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("upstream", choices=("scripted", "local"))
    parser.add_argument("--delay-ms", type=float, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.upstream == "scripted":
        import answers
        from scripted import ScriptedServer, SuiteScript

        script = SuiteScript(load_suite(DEFAULT_SUITE_DIR)).responder(answers.perfect)

        def respond(body: dict) -> dict:  # the suite's prompts get perfect answers; the agent's request "ok"
            try:
                return script(body)
            except KeyError:
                return {"content": "ok", "tool_calls": []}

        with ScriptedServer(respond, delay_s=args.delay_ms / 1000) as server:
            run(server.base_url, "lazy-model", args.rounds, f"scripted upstream, {args.delay_ms:.0f} ms added per call")
            print(f"({len(server.requests)} calls in all)")
        return
    from gatekeeper.measuring.localmodel import LocalModelServer

    with LocalModelServer() as server:
        run(server.base_url, server.model, args.rounds, f"real local model ({server.model}, llama_cpp.server)")


if __name__ == "__main__":
    main()
