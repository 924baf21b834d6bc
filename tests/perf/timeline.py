"""One request's time at one connection, step by step, in the running proxy.

    python tests/perf/timeline.py [--seconds 5]

Starts compare.py's mock upstream and `gatekeeper serve` (compare.py's "gatekeeper chat" row,
pinned as it pins) with timestamps taken at points of the request path, loads it with `wrk` at
one connection, and prints the median time between consecutive points: from the request's first
byte to the upstream request's write, the upstream's turn, from its answer to the client's answer
written, then to the next request's first byte. The points wrap the functions named (their
module's own binding, so a caller that imported one by name is not seen): a probe, not the proxy.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from time import perf_counter_ns as now

PERF = Path(__file__).resolve().parent
# (label, module, attribute): the point is taken when the function returns (`*` when it is entered).
POINTS = [
    ("uvicorn: headers parsed", "gatekeeper.server.http_server", "HttpToolsOneWrite.on_headers_complete*"),
    ("uvicorn: the request's task runs", "uvicorn.protocols.http.httptools_impl", "RequestResponseCycle.run_asgi*"),
    ("the app: model_call starts", "gatekeeper.server.app", "model_call*"),
    ("body read and parsed", "gatekeeper.server.pipeline", "read_json"),
    ("client identified", "gatekeeper.server.pipeline", "identity_of"),
    ("model and effort parsed", "gatekeeper.core.admit", "parse"),
    ("tier resolved", "gatekeeper.core.gatekeeper", "Gatekeeper.aresolve"),
    ("tools gated", "gatekeeper.core.admit", "gate_resolved"),
    ("tool budget", "gatekeeper.core.admit", "apply_budget"),
    ("admitted", "gatekeeper.server.pipeline", "aadmit"),
    ("upstream request written", "gatekeeper.server.http1", "_Connection.exchange*"),
    ("upstream answer arrives", "gatekeeper.server.http1", "_Connection.data_received*"),
    ("the request's task resumes", "gatekeeper.server.pipeline", "_Meanwhile.result*"),
    ("answer checked", "gatekeeper.server.pipeline", "Exchange.plain"),
    ("response built", "gatekeeper.server.pipeline", "ModelCall.finish"),
    ("uvicorn: the answer's head", "gatekeeper.server.http_server", "_Cycle.send*"),
]


def instrument(out: Path) -> None:
    """Wrap the points, and write the medians to `out` every 1,000 requests."""
    import importlib
    import inspect

    from gatekeeper.server import http_server

    marks: dict[str, int] = {}
    rows: list[list[int]] = []
    labels = ["request's first byte"] + [p[0] for p in POINTS] + ["answer written", "next request's first byte"]

    def wrap(label: str, module: str, attribute: str) -> None:
        on_entry = attribute.endswith("*")
        owner_name, _, name = attribute.rstrip("*").rpartition(".")
        owner = importlib.import_module(module)
        if owner_name:
            owner = getattr(owner, owner_name)
        func = getattr(owner, name)
        if inspect.iscoroutinefunction(func):

            async def timed(*args, **kwargs):
                if on_entry:
                    marks.setdefault(label, now())
                result = await func(*args, **kwargs)
                marks.setdefault(label, now())
                return result
        else:

            def timed(*args, **kwargs):
                if on_entry:
                    marks.setdefault(label, now())
                result = func(*args, **kwargs)
                marks.setdefault(label, now())
                return result

        setattr(owner, name, timed)

    for point in POINTS:
        wrap(*point)
    received = http_server.HttpToolsOneWrite.data_received
    write = http_server._HeadHeld.write

    def data_received(self, data: bytes) -> None:
        t = now()
        if "answer written" in marks:
            marks["next request's first byte"] = t
            if len(marks) == len(labels):
                rows.append([marks[label] for label in labels])
                if len(rows) % 1000 == 0:
                    report(rows[200:], labels, out)
        marks.clear()
        marks["request's first byte"] = t
        received(self, data)

    def head_and_body(self, data: bytes) -> None:
        if self._head:  # the answer's head goes out with its body now
            marks.setdefault("answer written", now())
        write(self, data)

    http_server.HttpToolsOneWrite.data_received = data_received
    http_server._HeadHeld.write = head_and_body


def report(rows: list[list[int]], labels: list[str], out: Path) -> None:
    lines = [f"{len(rows)} requests; median us from the step before (and from the first byte)"]
    for i in range(1, len(labels)):
        step = statistics.median(r[i] - r[i - 1] for r in rows) / 1000
        total = statistics.median(r[i] - r[0] for r in rows) / 1000
        lines.append(f"{labels[i]:32s} {step:7.1f} ({total:6.1f})")
    out.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--serve", nargs=3, metavar=("CONFIG", "PORT", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:  # the proxy's own process: instrumented, then `gatekeeper serve`
        config, port, out = args.serve
        instrument(Path(out))
        from gatekeeper.cli import main as cli

        sys.argv = ["gatekeeper", "serve", "--config", config, "--port", port]
        cli()
        return
    sys.path.insert(0, str(PERF))
    import compare

    workdir = Path(tempfile.mkdtemp(prefix="gk-timeline-"))
    up_port, port = compare.free_port(), compare.free_port()
    mock = compare.Target("upstream", [sys.executable, str(PERF / "mock_upstream.py"), "--port", str(up_port)], up_port)
    out = workdir / "timeline.txt"
    gk = compare.Target("gatekeeper", [], port)
    try:
        mock.start(workdir, "0", 10)
        config = compare.seed_gatekeeper(workdir, f"http://127.0.0.1:{up_port}/v1", "gk")
        gk.command = [sys.executable, __file__, "--serve", str(config), str(port), str(out)]
        gk.start(workdir, "1", 120)
        if gk.error or mock.error:
            raise SystemExit(gk.error or mock.error)
        body, script = compare.load_files(workdir)
        result = compare.run_load(gk.url, body, 1, args.seconds, "0", script)
        time.sleep(0.5)
        print(f"wrk at one connection: p50 {result['p50_ms']:.3f} ms, {result['rps']:,.0f} req/s")
        print(out.read_text() if out.exists() else "fewer than 1,200 requests: no timeline")
    finally:
        if gk.process is not None:
            os.killpg(gk.process.pid, signal.SIGTERM)
        gk.stop()
        mock.stop()


if __name__ == "__main__":
    main()
