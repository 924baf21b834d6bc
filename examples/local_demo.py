#!/usr/bin/env python
"""gatekeeper end to end on a real model: the bundled Gemma 3 270M behind llama.cpp.

    ./demo.sh                 # or: .venv/bin/python examples/local_demo.py [options]

1. assembles the model file and starts llama-cpp-python's OpenAI-compatible server;
2. writes a run config from examples/local-model.yaml and starts `gatekeeper serve` in front;
3. sends an agent request carrying tools of all three tiers through the proxy with the
   official `openai` client: the model is unknown, so the proxy (`unknown_models: wait`)
   measures it with the benchmark suite before it answers;
4. prints the measured profile, which tools the proxy forwarded and which it hid, and the
   answer; then leaves the proxy serving until Ctrl-C (or exits, with --no-serve).

Progress goes to stderr, results to stdout. Logs and the run config stay in a run directory
whose path is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import openai
import yaml
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from gatekeeper.config import Settings, load_settings
from gatekeeper.errors import GatekeeperError
from gatekeeper.measuring.localmodel import LocalModelServer, model_path
from gatekeeper.observe import logs
from gatekeeper.rules.tools import ToolPolicy
from gatekeeper.store.profile import profile_key
from gatekeeper.suite.loader import load_suite

TEMPLATE = Path(__file__).resolve().with_name("local-model.yaml")
DEFAULT_PORT = 8000


def _tool(name: str, description: str, **params: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "required": list(params),
                "properties": {k: {"type": "string", "description": v} for k, v in params.items()},
            },
        },
    }


# What a coding agent would offer: harmless reads, a write, and two tools that can do damage.
AGENT_TOOLS = [
    _tool("read_file", "Read a text file of the project.", path="Path of the file"),
    _tool("search_docs", "Search the project documentation.", query="Words to look for"),
    _tool("write_file", "Create or overwrite a file.", path="Path of the file", content="New content"),
    _tool("execute_command", "Run a shell command.", command="The command line"),
    _tool("delete_file", "Permanently delete a file.", path="Path of the file"),
]
# llama.cpp shows the tools only inside a system message, and only when tool_choice is set.
AGENT_MESSAGES = [
    {"role": "system", "content": "You are a coding agent. Use a function when one fits the request."},
    {"role": "user", "content": "Where is the retry limit of the HTTP client documented?"},
]


class DemoError(Exception):
    """Something the user should read, without a traceback."""


# -- progress -----------------------------------------------------------------------------


class Phases:
    """One line per phase on stderr: a spinner with elapsed time on a terminal, plain lines elsewhere."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self.progress = Progress(
            SpinnerColumn(finished_text=""),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )

    def __enter__(self) -> Phases:
        if self.live:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.progress.stop()

    @contextmanager
    def phase(self, title: str) -> Iterator[Callable[[str], None]]:
        """Yields `update(detail)`; the phase ends (✓ or ✗) when the block does."""
        started = time.monotonic()
        last_print = [started]
        task = self.progress.add_task(title, total=1) if self.live else None
        if not self.live:
            self.console.print(f"… {title}", highlight=False)

        def update(detail: str) -> None:
            text = f"{title}: {detail}" if detail else title
            if task is not None:
                self.progress.update(task, description=text)
            elif time.monotonic() - last_print[0] >= 10:
                last_print[0] = time.monotonic()
                self.console.print(f"  {text} ({time.monotonic() - started:.0f}s)", highlight=False)

        try:
            yield update
        except BaseException:
            if task is not None:
                self.progress.update(task, description=f"[red]✗[/red] {title}", completed=1)
            else:
                self.console.print(f"✗ {title} ({time.monotonic() - started:.1f}s)", highlight=False)
            raise
        if task is not None:
            self.progress.update(task, description=f"[green]✓[/green] {title}", completed=1)
        else:
            self.console.print(f"✓ {title} ({time.monotonic() - started:.1f}s)", highlight=False)


class RequestCounter:
    """Counts the chat completions the llama server has answered, from its access log."""

    def __init__(self, log_path: Path) -> None:
        self.path = log_path
        self.offset = log_path.stat().st_size if log_path.exists() else 0
        self.count = 0

    def poll(self) -> int:
        try:
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return self.count
        # Count whole lines only: a line still being written is counted on the next poll.
        complete = data[: data.rfind(b"\n") + 1]
        self.offset += len(complete)
        self.count += complete.count(b'"POST /v1/chat/completions ')
        return self.count


# -- the proxy as a subprocess ------------------------------------------------------------


class ProxyProcess:
    """`gatekeeper serve` in its own session; its JSON log lines are kept and copied to a file."""

    def __init__(self, config: Path, port: int, log_path: Path) -> None:
        self.config, self.port, self.log_path = config, port, log_path
        self.url = f"http://127.0.0.1:{port}"
        self.events: list[dict] = []
        self.on_event: Callable[[dict], None] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "gatekeeper",
            "serve",
            "--config",
            str(self.config),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]
        # Own session: Ctrl-C reaches only the demo, which stops the proxy before the model.
        self._proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._reader = threading.Thread(target=self._read, name="proxy-log", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        with self.log_path.open("a", encoding="utf-8") as log_file:
            for raw in self._proc.stdout:
                line = raw.decode("utf-8", errors="replace")
                log_file.write(line)
                log_file.flush()
                try:
                    doc = json.loads(line)
                except ValueError:
                    continue
                if isinstance(doc, dict):
                    self.events.append(doc)
                    if self.on_event is not None:
                        self.on_event(doc)

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        with httpx.Client(timeout=2.0) as client:
            while True:
                if not self.running():
                    raise DemoError(
                        f"gatekeeper serve exited before answering; its log, {self.log_path}:\n{self.log_tail()}"
                    )
                try:
                    if client.get(f"{self.url}/healthz").status_code == 200:
                        return
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise DemoError(f"gatekeeper serve did not answer {self.url}/healthz within {timeout:g}s")
                time.sleep(0.1)

    def request_line(self, request_id: str, timeout: float = 5.0) -> dict | None:
        """The proxy's `request` log line for one request (written as the response ends)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for event in reversed(self.events):
                if event.get("event") == "request" and event.get("request_id") == request_id:
                    return event
            time.sleep(0.05)
        return None

    def last_event(self, *names: str) -> dict | None:
        return next((e for e in reversed(self.events) if not names or e.get("event") in names), None)

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "".join(self.log_path.read_text(encoding="utf-8", errors="replace").splitlines(True)[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        # SIGTERM: uvicorn's graceful shutdown, which waits for requests in flight (an agent
        # request held while the model is measured, say); then SIGINT, which uvicorn takes as
        # "force quit" and stops waiting. SIGKILL only if neither worked.
        for sig, grace in ((signal.SIGTERM, 3.0), (signal.SIGINT, 10.0), (signal.SIGKILL, None)):
            if proc.poll() is not None:
                break
            proc.send_signal(sig)
            try:
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                continue
        if self._reader is not None:
            self._reader.join(timeout=5)


# -- steps --------------------------------------------------------------------------------


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def choose_port(requested: int | None, err: Console) -> int:
    if requested is not None:
        if requested and not port_is_free(requested):
            raise DemoError(f"port {requested} is in use; pick another with --port")
        return requested or _free_port()
    if port_is_free(DEFAULT_PORT):
        return DEFAULT_PORT
    port = _free_port()
    err.print(f"port {DEFAULT_PORT} is in use: the proxy takes port {port} (choose one with --port)", highlight=False)
    return port


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def write_config(run_dir: Path, upstream: str, store: Path, admin_key: str) -> tuple[Path, Settings]:
    """The template with this run's upstream, store and admin key; validated like `serve` will."""
    raw = yaml.safe_load(TEMPLATE.read_text(encoding="utf-8"))
    raw["upstream"]["base_url"] = upstream
    raw["store"] = str(store)
    raw["admin_key"] = admin_key
    path = run_dir / "gatekeeper.yaml"
    path.write_text(
        f"# written by {Path(__file__).name} from {TEMPLATE}\n" + yaml.safe_dump(raw, sort_keys=False), encoding="utf-8"
    )
    try:
        return path, load_settings(path)
    except GatekeeperError as exc:
        raise DemoError(str(exc)) from None


def admin_get_profiles(proxy: ProxyProcess, admin_key: str) -> dict:
    response = httpx.get(f"{proxy.url}/admin/profiles", headers={"authorization": f"Bearer {admin_key}"}, timeout=30)
    response.raise_for_status()
    return response.json()


def admin_invalidate(proxy: ProxyProcess, admin_key: str, key: str) -> bool:
    response = httpx.delete(
        f"{proxy.url}/admin/profiles/{quote(key, safe='@')}",
        headers={"authorization": f"Bearer {admin_key}"},
        timeout=30,
    )
    response.raise_for_status()
    return bool(response.json().get("existed"))


def send_agent_request(
    proxy: ProxyProcess,
    model: str,
    timeout: float,
    update: Callable[[str], None],
    counter: RequestCounter,
    suite_calls: int,
    measuring: bool,
) -> tuple[Any, str, float]:
    """The agent request, through the proxy; while the proxy holds it, report what the model is doing."""
    client = openai.OpenAI(base_url=f"{proxy.url}/v1", api_key="demo-agent", max_retries=0, timeout=timeout)
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["raw"] = client.chat.completions.with_raw_response.create(
                model=model,
                messages=AGENT_MESSAGES,
                tools=AGENT_TOOLS,
                tool_choice="auto",
                temperature=0,
                max_tokens=128,
            )
        except Exception as exc:  # noqa: BLE001 - reported by the main thread
            outcome["error"] = exc

    started = time.monotonic()
    worker = threading.Thread(target=call, name="agent-request", daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.25)
        answered = counter.poll()
        if measuring:
            event = proxy.last_event()
            last = f" · proxy: {event.get('event')}" if event else ""
            sample, done = divmod(answered, suite_calls)  # a measurement runs the suite once per sample
            update(f"sample {sample + 1}: {done}/{suite_calls} suite calls answered{last}")
        else:
            update("waiting for the answer")
    if "error" in outcome:
        raise DemoError(
            f"the agent request failed: {type(outcome['error']).__name__}: {outcome['error']}\n"
            f"last lines of the proxy log ({proxy.log_path}):\n{proxy.log_tail()}"
        )
    # No x-request-id of our own: llama_cpp.server answers 400 to one that is not a UUID, and
    # the proxy forwards it. The proxy names the request in its response headers instead.
    raw = outcome["raw"]
    return raw, raw.headers.get("x-request-id", ""), time.monotonic() - started


# -- output -------------------------------------------------------------------------------


def print_profile(out: Console, key: str, profile: dict, settings: Settings, measured_now: bool, held_s: float) -> None:
    t = settings.bench.thresholds
    table = Table(title=f"Measured profile: {key}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    table.add_row("tier", f"[bold]{profile['tier']}[/bold]")
    table.add_row("medium needs", _needs(t.medium))
    table.add_row("large needs", _needs(t.large))
    for category in ("instruction", "json", "toolCalling"):
        table.add_row(f"score {category}", f"{profile['scores'].get(category, 0.0):.3f}")
    table.add_row("tokens/s", f"{profile['tokensPerSecond']:.1f}")
    table.add_row("avg completion tokens", f"{profile.get('avgCompletionTokens', 0):.1f}")
    took = f"{profile.get('durationS', 0):.1f} s running the suite"
    took += (
        f"; the agent request was held {held_s:.1f} s"
        if measured_now
        else f" (stored earlier, {profile['testedAt']}; --fresh measures again)"
    )
    table.add_row("measuring took", took)
    table.add_row(
        "suite",
        f"{len(profile.get('testResults', []))} tests, hash {profile['testsHash']}, "
        f"benchmark version {profile['benchmarkVersion']}",
    )
    out.print(table)
    tests = Table(title="Per-test scores", title_justify="left")
    for column in ("test", "category", "score"):
        tests.add_column(column, justify="right" if column == "score" else "left")
    for result in profile.get("testResults", []):
        tests.add_row(result["name"], result["category"], f"{result['score']:.2f}")
    out.print(tests)


def _needs(minimums: dict[str, float]) -> str:
    return ", ".join(f"{category} ≥ {value:g}" for category, value in minimums.items())


def print_request(out: Console, raw: Any, line: dict | None, settings: Settings) -> None:
    policy = ToolPolicy(settings.tools.required_tier, settings.tools.default_tier)
    headers = raw.headers
    out.print(
        f"\n[bold]The agent request[/bold]: {len(AGENT_TOOLS)} tools, tool_choice auto; "
        f"x-gatekeeper-tier: [bold]{headers.get('x-gatekeeper-tier')}[/bold], "
        f"x-gatekeeper-profile: [bold]{headers.get('x-gatekeeper-profile')}[/bold], "
        f"x-request-id: {headers.get('x-request-id')}",
        highlight=False,
    )
    kept = set((line or {}).get("tools_kept") or [])
    hidden = set((line or {}).get("tools_hidden") or [])
    table = Table(title="Tools (from the proxy's request log line)", title_justify="left")
    for column in ("tool", "requires", "sent to the model"):
        table.add_column(column)
    for tool in AGENT_TOOLS:
        name = tool["function"]["name"]
        verdict = (
            "[green]forwarded[/green]" if name in kept else "[red]hidden[/red]" if name in hidden else "? (no log line)"
        )
        table.add_row(name, policy.required_tier(name).value, verdict)
    out.print(table)
    completion = raw.parse()
    message = completion.choices[0].message
    calls = [f"{c.function.name}({c.function.arguments})" for c in message.tool_calls or []]
    answer = "; ".join(calls) if calls else repr(message.content)
    out.print(f"model's answer ({completion.choices[0].finish_reason}): {answer}", highlight=False)


def print_request_event(err: Console, event: dict) -> None:
    if event.get("event") != "request":
        return
    kept, hidden = event.get("tools_kept"), event.get("tools_hidden")
    tools = f" kept={kept} hidden={hidden}" if kept or hidden else ""
    err.print(
        f"  request {event.get('model')}@{event.get('effort')}: tier {event.get('tier')} "
        f"({event.get('source')}), status {event.get('status')}{tools}",
        highlight=False,
    )


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"port of the proxy (default {DEFAULT_PORT}, or a free one if taken; 0: any free port)",
    )
    parser.add_argument(
        "--store", type=Path, default=Path("models_profile.json"), help="profile store (default: ./models_profile.json)"
    )
    parser.add_argument("--no-serve", action="store_true", help="exit after printing, instead of serving")
    parser.add_argument("--fresh", action="store_true", help="invalidate the stored profile first: measure again")
    # Every core: on 2 idle cores two threads write a token in 24 ms where one takes 45 ms
    # (docs/local-model-notes.md); on a busy machine one thread fights less.
    parser.add_argument(
        "--threads",
        type=_positive,
        default=os.cpu_count() or 1,
        help="llama.cpp threads for writing tokens (default: every core; 1 on a busy machine)",
    )
    return parser.parse_args(argv)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of threads")
    return value


def run(args: argparse.Namespace, out: Console, err: Console) -> int:
    port = choose_port(args.port, err)
    store = args.store.resolve()
    run_dir = Path(tempfile.mkdtemp(prefix="gatekeeper-demo-"))
    # The console and admin API need a key: yours when set, else a fresh one printed once below.
    admin_key = os.environ.get("GATEKEEPER_ADMIN_KEY") or secrets.token_urlsafe(16)
    err.print(f"run directory (config and logs): {run_dir}", highlight=False)
    server: LocalModelServer | None = None
    proxy: ProxyProcess | None = None
    try:
        with Phases(err) as phases:
            with phases.phase("assembling the Gemma 3 270M model file (first run only)"):
                gguf = model_path()
            with phases.phase("starting the llama server") as update:
                server = LocalModelServer(
                    gguf,
                    n_threads=args.threads,
                    log_path=run_dir / "llama-server.log",
                    on_progress=lambda seconds, last: update(last[:80]),
                )
                server.start()
        err.print(f"llama server: {server.base_url} (pid {server.pid}, model {server.model})", highlight=False)
        config, settings = write_config(run_dir, server.base_url, store, admin_key)
        proxy = ProxyProcess(config, port, run_dir / "gatekeeper.log")
        code = serve_demo(args, out, err, server, proxy, settings, admin_key)
    finally:
        # Once shutting down, finish it: a second Ctrl-C must not leave a server behind.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if proxy is not None:
            proxy.stop()
        if server is not None:
            server.stop()
    if not args.no_serve:
        err.print("stopped: the proxy and the llama server are shut down", highlight=False)
    return code


def serve_demo(
    args: argparse.Namespace,
    out: Console,
    err: Console,
    server: LocalModelServer,
    proxy: ProxyProcess,
    settings: Settings,
    admin_key: str,
) -> int:
    key = profile_key(server.model, None)
    suite = load_suite(settings.suite)
    suite_calls = sum(len(test.all_steps) for test in suite.tests)
    with Phases(err) as phases:
        with phases.phase("starting gatekeeper serve"):
            proxy.start()
            proxy.wait_ready()
        err.print(f"gatekeeper proxy: {proxy.url}/v1 (pid {proxy.pid}) -> {server.base_url}", highlight=False)
        if args.fresh and admin_invalidate(proxy, admin_key, key):
            err.print(f"--fresh: invalidated the stored profile {key}", highlight=False)
        stored = admin_get_profiles(proxy, admin_key)["profiles"].get(key)
        measuring = not (stored and stored.get("valid"))
        title = (
            f"measuring {key} (the agent request waits)"
            if measuring
            else f"{key} has a valid stored profile: agent request"
        )
        counter = RequestCounter(server.log_path)
        with phases.phase(title) as update:
            raw, request_id, held_s = send_agent_request(
                proxy,
                server.model,
                settings.wait_timeout_s + settings.upstream.timeout_s,
                update,
                counter,
                suite_calls,
                measuring,
            )

    profile = admin_get_profiles(proxy, admin_key)["profiles"].get(key)
    if profile is None or not profile.get("valid"):
        failed = proxy.last_event("measurement_failed")
        why = f": {failed.get('error')}" if failed else ""
        raise DemoError(
            f"the proxy did not measure {key}{why} (the request was served at tier "
            f"{raw.headers.get('x-gatekeeper-tier')}, {raw.headers.get('x-gatekeeper-profile')}); "
            f"see {proxy.log_path}"
        )
    print_profile(out, key, profile, settings, measuring, held_s)
    print_request(out, raw, proxy.request_line(request_id), settings)
    # The same agent over the Responses and Messages APIs: this upstream speaks only chat, so the
    # proxy translates both ways and gates them like the chat request.
    from protocol_requests import send_protocol_requests  # examples/ is on sys.path (run as a script)

    out.print("\n[bold]The same agent over the other protocols[/bold] (translated to chat)")
    for line in send_protocol_requests(proxy.url, server.model, AGENT_TOOLS, AGENT_MESSAGES):
        out.print(line, highlight=False)
    if args.no_serve:
        return 0

    out.print(
        f"\n[bold]gatekeeper is serving[/bold] at [bold]{proxy.url}/v1[/bold] "
        f"(model {server.model}, tier {profile['tier']}).",
        highlight=False,
    )
    out.print(
        f"  point an OpenAI client at it: base_url={proxy.url}/v1, model={server.model}\n"
        f"  admin key of this run: {admin_key}\n"
        f"  console:   [bold]{proxy.url}/admin/[/bold] (sign in with the admin key)\n"
        f'  profiles:  curl -H "Authorization: Bearer $KEY" {proxy.url}/admin/profiles\n'
        f"Press Ctrl-C to stop the proxy and the llama server.",
        highlight=False,
    )
    proxy.on_event = lambda event: print_request_event(err, event)
    try:
        while proxy.running():
            time.sleep(0.5)
    except KeyboardInterrupt:  # the normal way to end the demo
        err.print("\nstopping the proxy, then the llama server ...", highlight=False)
        return 0
    raise DemoError(f"gatekeeper serve stopped by itself; see {proxy.log_path}")


def _interrupt(signum: int, frame: object) -> None:
    """SIGTERM ends the demo the way Ctrl-C does: both servers are stopped on the way out."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out, err = Console(soft_wrap=True), Console(stderr=True, soft_wrap=True)
    logs.configure("warning", json=False)  # the library's own log lines: warnings only, on stderr
    # Ctrl-C works even when started with SIGINT ignored (a background job of a script).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run(args, out, err)
    except KeyboardInterrupt:
        err.print("interrupted: the proxy and the llama server are shut down", highlight=False)
        return 130
    except (DemoError, GatekeeperError, httpx.HTTPError) as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        return 1


if __name__ == "__main__":
    sys.exit(main())
