"""gatekeeper's cost next to LiteLLM's proxy and a minimal passthrough (issue #6).

    python tests/perf/compare.py [--duration 5] [--concurrency 1,8,32] [--rounds 3]

Starts an instant mock upstream (mock_upstream.py) and four targets, then measures them in turn
(interleaved, `--rounds` times): `direct` (the upstream itself), `gatekeeper` (the real
`gatekeeper serve` with a measured profile and a few tool rules), `litellm` (LiteLLM's proxy, one
worker, no database, installed into tests/perf/.venv-litellm on first use) and `floor`
(floor.py: Starlette + httpx that parses, filters `tools` and re-serialises). Load comes from
`wrk` (a Lua script POSTs the body) or, without it, loadgen.py in its own process. While one
target is measured the other proxies are paused (SIGSTOP), and with two or more cores the
proxy under test runs on CPU 1 while the upstream and the load generator share CPU 0.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import orjson

PERF = Path(__file__).resolve().parent
ROOT = PERF.parent.parent
sys.path.insert(0, str(PERF))

import loadgen  # noqa: E402

LITELLM_VENV = PERF / ".venv-litellm"
MODEL = "perf-model"
# Tier `medium` for the measured profile; these three need `large` and are filtered out.
BLOCKED = ("execute_command", "delete_file", "send_email")
RULES = {"execute_command": "large", "delete_file": "large", "send_email": "large", "write_*": "medium"}
TOOL_NAMES = ("read_file", "list_directory", "search_code", "get_weather", "write_file", "write_config",
              "execute_command", "delete_file", "http_get", "send_email")


def request_body(stream: bool = False, model: str = MODEL) -> bytes:
    tools = [{"type": "function", "function": {
        "name": name, "description": f"{name.replace('_', ' ')}: does what its name says, carefully.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "Where to act."},
            "options": {"type": "object", "properties": {"recursive": {"type": "boolean"},
                                                         "limit": {"type": "integer", "minimum": 1}}}},
            "required": ["path"]}}} for name in TOOL_NAMES]
    body = {"model": model, "messages": [
        {"role": "system", "content": "You are a careful coding agent. Use tools when they help."},
        {"role": "user", "content": "Read README.md and summarise the project in one sentence."}],
        "tools": tools, "tool_choice": "auto", "temperature": 0.2, "stream": stream}
    return orjson.dumps(body)


# -- processes ---------------------------------------------------------------------------------

def free_port() -> int:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def tree(pid: int) -> list[int]:
    """pid and all its descendants, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo += children.get(current, [])
    return found


def rss_mib(pid: int) -> float:
    total = 0
    for p in tree(pid):
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total / 1024


@dataclass
class Target:
    name: str
    command: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen | None = None
    startup_s: float = float("nan")
    rss_mib: float = float("nan")
    error: str | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1/chat/completions"

    def start(self, workdir: Path, cpu: str | None, timeout: float) -> None:
        prefix = ["taskset", "-c", cpu] if cpu else []
        log = open(workdir / f"{self.name}.log", "wb")
        started = time.perf_counter()
        self.process = subprocess.Popen(prefix + self.command, stdout=log, stderr=subprocess.STDOUT,
                                        env=os.environ | self.env, cwd=workdir, start_new_session=True)
        body = request_body()
        while time.perf_counter() - started < timeout:
            if self.process.poll() is not None:
                self.error = f"exited with {self.process.returncode} (see {workdir / (self.name + '.log')})"
                return
            if asyncio.run(loadgen.post_once(self.url, body, timeout=2.0)) == 200:
                self.startup_s = time.perf_counter() - started
                return
            time.sleep(0.01)
        self.error = f"no answer within {timeout:.0f} s"
        self.stop()

    def signal(self, sig: int) -> None:
        if self.process and self.process.poll() is None:
            for pid in tree(self.process.pid):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.signal(signal.SIGCONT)
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


def ensure_litellm(reinstall: bool) -> Path | None:
    """The `litellm` command of a private venv, installed on first use; None when that fails."""
    exe = LITELLM_VENV / "bin" / "litellm"
    if exe.exists() and not reinstall:
        return exe
    print("installing litellm[proxy] into", LITELLM_VENV, "(once) ...", file=sys.stderr)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True)
        subprocess.run([str(LITELLM_VENV / "bin" / "pip"), "install", "-q", "litellm[proxy]"], check=True)
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"litellm unavailable: {exc}", file=sys.stderr)
        return None
    return exe if exe.exists() else None


def litellm_version() -> str:
    out = subprocess.run([str(LITELLM_VENV / "bin" / "python"), "-c",
                          "import importlib.metadata as m; print(m.version('litellm'))"],
                         capture_output=True, text=True)
    return out.stdout.strip() or "?"


def seed_gatekeeper(workdir: Path, upstream: str) -> Path:
    """A config with tool rules, and a store holding a valid measured profile for MODEL."""
    from gatekeeper.profiles import JsonFileStore, Profile
    from gatekeeper.suite import DEFAULT_SUITE_DIR, load_suite

    suite = load_suite(DEFAULT_SUITE_DIR)
    store = workdir / "models_profile.json"
    JsonFileStore(store).save([Profile(
        model=MODEL, provider="openai-compatible", tier="medium",
        scores={"instruction": 0.8, "json": 0.8, "toolCalling": 0.7}, tokens_per_second=50.0,
        tested_at=datetime.now(timezone.utc).isoformat(), benchmark_version=suite.version, tests_hash=suite.hash)])
    config = workdir / "gatekeeper.yaml"
    config.write_text(json.dumps({  # JSON is YAML
        "upstream": {"base_url": upstream, "api_key": "sk-mock"}, "suite": str(DEFAULT_SUITE_DIR),
        "store": str(store), "unknown_models": "wait", "wait_timeout_s": 120,
        "tools": {"default_tier": "small", "required_tier": RULES}}, indent=2))
    return config


def litellm_config(workdir: Path, upstream: str) -> Path:
    config = workdir / "litellm.yaml"
    config.write_text(json.dumps({
        "model_list": [{"model_name": MODEL, "litellm_params": {
            "model": f"openai/{MODEL}", "api_base": upstream, "api_key": "sk-mock"}}],
        "litellm_settings": {"telemetry": False}}, indent=2))
    return config


# -- load ---------------------------------------------------------------------------------------

WRK_SCRIPT = """
local f = io.open("%s", "rb"); wrk.body = f:read("*a"); f:close()
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer sk-perf"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"p50_us": %%d, "p99_us": %%d, "requests": %%d, "duration_us": %%d, "errors": %%d}\\n',
    latency:percentile(50), latency:percentile(99), summary.requests, summary.duration,
    e.connect + e.read + e.write + e.timeout + e.status))
end
"""


def run_load(url: str, body_file: Path, concurrency: int, seconds: float, cpu: str | None, wrk_script: Path | None) -> dict:
    prefix = ["taskset", "-c", cpu] if cpu else []
    if wrk_script is not None:
        threads = min(2, concurrency)
        out = subprocess.run(prefix + ["wrk", "-t", str(threads), "-c", str(concurrency), "-d", f"{max(1, round(seconds))}s",  # wrk takes whole seconds
                                       "--timeout", "10s", "-s", str(wrk_script), url],
                             capture_output=True, text=True, timeout=seconds + 60)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"wrk failed: {out.stdout} {out.stderr}")
        r = json.loads(line[7:])
        return {"p50_ms": r["p50_us"] / 1000, "p99_ms": r["p99_us"] / 1000,
                "rps": r["requests"] / (r["duration_us"] / 1e6), "errors": r["errors"], "requests": r["requests"]}
    out = subprocess.run(prefix + [sys.executable, str(PERF / "loadgen.py"), url, str(body_file), str(concurrency),
                                   str(seconds)], capture_output=True, text=True, timeout=seconds + 60)
    return json.loads(out.stdout)


async def measure_stream(url: str, n: int) -> tuple[float, float, int]:
    """Median time to first event and to the end, over n streamed requests on one connection."""
    host, port, raw = loadgen.request_bytes(url, request_body(stream=True))
    reader, writer = await asyncio.open_connection(host, port)
    ttfb, total, errors = [], [], 0
    try:
        for i in range(n + 3):
            try:
                first, end = await asyncio.wait_for(loadgen.stream_once(reader, writer, raw), 30)
            except (RuntimeError, asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError):
                errors += 1
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
                continue
            if i >= 3:  # warm-up
                ttfb.append(first)
                total.append(end)
    finally:
        writer.close()
    med = (lambda xs: statistics.median(xs) * 1000 if xs else float("nan"))
    return med(ttfb), med(total), errors


# -- report -------------------------------------------------------------------------------------

def fmt(x: float, digits: int = 2) -> str:
    return "n/a" if x != x else f"{x:.{digits}f}"


def ratio(a: float, b: float) -> str:
    return "n/a" if a != a or b != b or b == 0 else f"{a / b:.2f}x"


def report(targets: list[Target], results: dict, streams: dict, lazy: dict, concurrency: list[int],
           meta: dict) -> str:
    names = [t.name for t in targets if t.error is None]
    by = {t.name: t for t in targets}
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731
    agg: dict[tuple[str, int], dict] = {}
    for (name, c), runs in results.items():
        agg[name, c] = {"p50": med([r["p50_ms"] for r in runs]), "p99": med([r["p99_ms"] for r in runs]),
                        "rps": med([r["rps"] for r in runs]), "errors": sum(r["errors"] for r in runs),
                        "requests": sum(r["requests"] for r in runs)}
    lines = [f"# gatekeeper vs LiteLLM proxy vs floor — {meta['date']}", "",
             f"machine: {meta['machine']}; python {meta['python']}; litellm {meta['litellm']}; load: {meta['load']}; "
             f"{meta['rounds']} rounds x {meta['duration']} s per target and concurrency (median of rounds); "
             f"{meta['pinning']}", ""]
    lines += ["| target | c | p50 ms | p99 ms | added p50 ms | req/s | errors |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    for c in concurrency:
        direct = agg.get(("direct", c), {}).get("p50", float("nan"))
        for name in names:
            a = agg.get((name, c))
            if a:
                added = "—" if name == "direct" else fmt(a["p50"] - direct)
                lines.append(f"| {name} | {c} | {fmt(a['p50'])} | {fmt(a['p99'])} | {added} | {fmt(a['rps'], 0)} "
                             f"| {a['errors']}/{a['requests']} |")
    lines += ["", "| target | start-up s | RSS after load MiB | stream TTFB ms (c=1) | stream total ms (c=1) |",
              "|---|---:|---:|---:|---:|"]
    for t in targets:
        if t.error is not None:
            lines.append(f"| {t.name} | unavailable: {t.error} | | | |")
            continue
        s = streams.get(t.name, (float("nan"),) * 3)
        startup = "—" if t.name == "direct" else fmt(t.startup_s)
        lines.append(f"| {t.name} | {startup} | {fmt(t.rss_mib, 0)} | {fmt(s[0])} | {fmt(s[1])} |")
    if lazy:
        lines += ["", f"lazy measurement (`unknown_models: wait`, unknown model, instant upstream): first request "
                      f"{fmt(lazy['first_ms'], 0)} ms (suite of {lazy['tests']} tests), the next {fmt(lazy['next_ms'])} ms"]

    def added(name: str, c: int) -> float:
        if (name, c) not in agg or ("direct", c) not in agg:
            return float("nan")
        return agg[name, c]["p50"] - agg["direct", c]["p50"]

    def rps(name: str, c: int) -> float:
        return agg.get((name, c), {}).get("rps", float("nan"))

    lo, hi = min(concurrency), max(concurrency)
    gk = by.get("gatekeeper")
    rows = [("added p50 latency, c=%d" % lo, lambda n: added(n, lo)),
            ("req/s, c=%d" % hi, lambda n: rps(n, hi)),
            ("RSS after load", lambda n: by[n].rss_mib if n in by and by[n].error is None else float("nan")),
            ("start-up", lambda n: by[n].startup_s if n in by and by[n].error is None else float("nan"))]
    if gk is not None and gk.error is None:
        lines += ["", "| gatekeeper ÷ | LiteLLM | floor |", "|---|---:|---:|"]
        for label, value in rows:
            lines.append(f"| {label} | {ratio(value('gatekeeper'), value('litellm'))} "
                         f"| {ratio(value('gatekeeper'), value('floor'))} |")
        ttfb_gap = streams.get("gatekeeper", (float("nan"),))[0] - streams.get("direct", (float("nan"),))[0]
        # (label, measured, bound): the goal is met when measured <= bound; NaN means not measured.
        checks = [
            ("added p50 at c=%d <= 1.5x floor's" % lo, added("gatekeeper", lo), 1.5 * added("floor", lo)),
            ("added p50 at c=%d >= 8x lower than LiteLLM's" % lo, added("gatekeeper", lo) * 8, added("litellm", lo)),
            ("req/s at c=%d >= 0.8x floor's" % hi, 0.8 * rps("floor", hi), rps("gatekeeper", hi)),
            ("req/s at c=%d >= 5x LiteLLM's" % hi, 5 * rps("litellm", hi), rps("gatekeeper", hi)),
            ("RSS after load < 100 MiB", gk.rss_mib, 100),
            ("start-up < 2 s", gk.startup_s, 2),
            ("stream TTFB within 1 ms of direct (c=1)", ttfb_gap, 1.0),
        ]

        def verdict(measured: float, bound: float) -> str:
            if math.isnan(measured) or math.isnan(bound):
                return "not measured"
            return "met" if measured <= bound else "NOT met"

        lines += ["", "goals: " + "; ".join(f"{label}: {verdict(m, b)}" for label, m, b in checks)]
    return "\n".join(lines)


# -- main ---------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=5.0, help="seconds of load per target, c and round")
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of unrecorded load before each run")
    parser.add_argument("--targets", default="direct,gatekeeper,litellm,floor")
    parser.add_argument("--stream-requests", type=int, default=100)
    parser.add_argument("--stream-gap-ms", type=float, default=2.0, help="upstream delay between SSE events")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    parser.add_argument("--no-wrk", action="store_true", help="use loadgen.py even when wrk is installed")
    parser.add_argument("--no-lazy", action="store_true", help="skip the lazy-measurement timing")
    parser.add_argument("--reinstall-litellm", action="store_true")
    parser.add_argument("--keep", action="store_true", help="leave targets running until Enter (for py-spy)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the targets (finally below)
    concurrency = [int(c) for c in args.concurrency.split(",")]
    wanted = args.targets.split(",")
    pin = not args.no_pin and (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None
    client_cpu, server_cpu = ("0", "1") if pin else (None, None)

    workdir = Path(tempfile.mkdtemp(prefix="gk-perf-"))
    body_file = workdir / "body.json"
    body_file.write_bytes(request_body())
    wrk_script = None
    if shutil.which("wrk") and not args.no_wrk:
        wrk_script = workdir / "post.lua"
        wrk_script.write_text(WRK_SCRIPT % body_file)

    upstream_port = free_port()
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    mock = Target("direct", [sys.executable, str(PERF / "mock_upstream.py"), "--port", str(upstream_port),
                             "--gap-ms", str(args.stream_gap_ms)], upstream_port)
    targets = [mock]
    if "gatekeeper" in wanted:
        config = seed_gatekeeper(workdir, upstream)
        exe = str(Path(sys.executable).parent / "gatekeeper")
        targets.append(Target("gatekeeper", [exe, "serve", "--config", str(config), "--port", str(free_port())],
                              0))
        targets[-1].port = int(targets[-1].command[-1])
    litellm_ver = "not run"
    if "litellm" in wanted:
        exe_path = ensure_litellm(args.reinstall_litellm)
        port = free_port()
        target = Target("litellm", [str(exe_path), "--config", str(litellm_config(workdir, upstream)), "--host",
                                    "127.0.0.1", "--port", str(port), "--num_workers", "1"], port,
                        # The load generators send `Authorization: Bearer sk-perf`; LiteLLM checks it.
                        env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR",
                             "DISABLE_SCHEMA_UPDATE": "true", "LITELLM_MASTER_KEY": "sk-perf",
                             "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true"})
        if exe_path is None:
            target.error = "litellm[proxy] could not be installed"
        else:
            litellm_ver = litellm_version()
        targets.append(target)
    if "floor" in wanted:
        port = free_port()
        targets.append(Target("floor", [sys.executable, str(PERF / "floor.py"), "--port", str(port), "--upstream",
                                        upstream, "--block", ",".join(BLOCKED)], port))

    results: dict[tuple[str, int], list[dict]] = {}
    streams_raw: dict[str, list[tuple[float, float, int]]] = {}
    lazy: dict = {}
    try:
        mock.start(workdir, client_cpu, 10)
        if mock.error:
            raise SystemExit(f"mock upstream failed: {mock.error}")
        for t in targets[1:]:
            if t.error is None:
                print(f"starting {t.name} ...", file=sys.stderr)
                t.start(workdir, server_cpu, 180)
                if t.error:
                    print(f"{t.name} unavailable: {t.error}", file=sys.stderr)
                t.signal(signal.SIGSTOP)
        live = [t for t in targets if t.error is None]
        for rnd in range(args.rounds):
            for c in concurrency:
                for t in live:
                    t.signal(signal.SIGCONT)
                    if args.warmup:
                        run_load(t.url, body_file, c, args.warmup, client_cpu, wrk_script)
                    r = run_load(t.url, body_file, c, args.duration, client_cpu, wrk_script)
                    results.setdefault((t.name, c), []).append(r)
                    print(f"round {rnd + 1} c={c} {t.name}: p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms "
                          f"{r['rps']:.0f} req/s errors {r['errors']}", file=sys.stderr)
                    if t is not mock:
                        t.signal(signal.SIGSTOP)
            for t in live:
                t.signal(signal.SIGCONT)
                streams_raw.setdefault(t.name, []).append(asyncio.run(measure_stream(t.url, args.stream_requests)))
                if t is not mock:
                    t.signal(signal.SIGSTOP)
        for t in live:
            t.signal(signal.SIGCONT)
            t.rss_mib = rss_mib(t.process.pid)
        gk = next((t for t in live if t.name == "gatekeeper"), None)
        if gk is not None and not args.no_lazy:
            from gatekeeper.suite import DEFAULT_SUITE_DIR, load_suite

            async def timed(model: str) -> tuple[float, int | None]:
                started = time.perf_counter()
                status = await loadgen.post_once(gk.url, request_body(model=model), timeout=300)
                return (time.perf_counter() - started) * 1000, status

            first, status = asyncio.run(timed("lazy-model"))
            following, _ = asyncio.run(timed("lazy-model"))
            lazy = {"first_ms": first, "next_ms": following, "status": status,
                    "tests": len(load_suite(DEFAULT_SUITE_DIR).tests)}
        if args.keep:
            print({t.name: t.process.pid for t in live}, "— press Enter to stop", file=sys.stderr)
            input()
    finally:
        for t in reversed(targets):
            t.stop()

    streams = {name: (statistics.median(x[0] for x in runs), statistics.median(x[1] for x in runs),
                      sum(x[2] for x in runs)) for name, runs in streams_raw.items()}
    meta = {"date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "machine": f"{os.cpu_count()} CPU {os.uname().machine} ({os.uname().release})",
            "python": sys.version.split()[0], "litellm": litellm_ver,
            "load": "wrk" if wrk_script else "loadgen.py (asyncio, own process)",
            "rounds": args.rounds, "duration": args.duration,
            "pinning": "proxies on CPU 1, upstream and load generator on CPU 0" if pin else "no CPU pinning"}
    print(report(targets, results, streams, lazy, concurrency, meta))
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "results": {f"{k[0]}@{k[1]}": v for k, v in results.items()},
                                         "streams": streams, "lazy": lazy,
                                         "targets": {t.name: {"startup_s": t.startup_s, "rss_mib": t.rss_mib,
                                                              "error": t.error} for t in targets}}, indent=2))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
