"""Raw-socket HTTP/1.1 clients for tests/perf/compare.py (keep-alive, no HTTP library in the way).

- `load`: N keep-alive connections POSTing the same body for a fixed time (the fallback when
  `wrk` is not installed; run it in its own process: `python loadgen.py URL BODYFILE C SECONDS`).
- `stream_once`: one streamed request; time to first SSE event and to the end of the stream.
- `post_once`: one request; the status, or None when nothing answered (start-up probe).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from urllib.parse import urlsplit


def request_bytes(url: str, body: bytes) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    head = (
        f"POST {parts.path} HTTP/1.1\r\nhost: {parts.netloc}\r\ncontent-type: application/json\r\n"
        f"authorization: Bearer sk-perf\r\ncontent-length: {len(body)}\r\n\r\n"
    ).encode()
    return parts.hostname or "127.0.0.1", parts.port or 80, head + body


async def _read_response(reader: asyncio.StreamReader) -> int:
    """Read one whole response (content-length or chunked); return its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    if b"transfer-encoding: chunked" in lower:
        while True:
            size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                return status
    start = lower.find(b"content-length:")
    if start >= 0:
        await reader.readexactly(int(lower[start + 15 : lower.find(b"\r\n", start)]))
    return status


async def load(url: str, body: bytes, concurrency: int, seconds: float) -> dict:
    host, port, raw = request_bytes(url, body)
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal errors
        reader, writer = await asyncio.open_connection(host, port)
        while time.perf_counter() < deadline:
            started = time.perf_counter()
            writer.write(raw)
            try:
                status = await _read_response(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                errors += 1
                writer.close()
                reader, writer = await asyncio.open_connection(host, port)
                continue
            if status != 200:
                errors += 1
            latencies.append(time.perf_counter() - started)
        writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(len(latencies) * p / 100))] * 1000 if latencies else float("nan")

    return {
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "rps": len(latencies) / elapsed,
        "requests": len(latencies),
        "errors": errors,
    }


async def stream_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, raw: bytes) -> tuple[float, float]:
    """(seconds to the first `data:` event, seconds to the end of the stream) on an open connection."""
    started = time.perf_counter()
    writer.write(raw)
    head = await reader.readuntil(b"\r\n\r\n")
    if head[9:12] != b"200" or b"chunked" not in head.lower():
        raise RuntimeError(f"unexpected stream answer: {head[:200]!r}")
    first = None
    while True:
        size = int((await reader.readuntil(b"\r\n")).strip().split(b";")[0], 16)
        data = await reader.readexactly(size + 2)
        if first is None and b"data:" in data:
            first = time.perf_counter() - started
        if size == 0:
            return first or float("nan"), time.perf_counter() - started


async def post_once(url: str, body: bytes, timeout: float = 5.0) -> int | None:
    host, port, raw = request_bytes(url, body)
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (TimeoutError, OSError):
        return None
    try:
        writer.write(raw)
        return await asyncio.wait_for(_read_response(reader), timeout)
    except (TimeoutError, OSError, asyncio.IncompleteReadError):
        return None
    finally:
        writer.close()


if __name__ == "__main__":
    url, body_file, concurrency, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    with open(body_file, "rb") as f:
        print(json.dumps(asyncio.run(load(url, f.read(), concurrency, seconds))))
