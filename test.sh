#!/usr/bin/env bash
# Install what is missing, then run the whole test suite (the real local model included).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
# The JavaScript clients the framework tests drive (Vercel AI SDK, Codex), pinned by their lock
# files: installed here from the npm registry, never by the tests themselves.
for dir in tests/js tests/js/codex; do
    if [[ ! -d "$dir/node_modules" ]]; then
        echo "test.sh: npm ci in $dir" >&2
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2)
    fi
done
# The real local model is part of the suite here: its tests must not skip themselves away.
export GATEKEEPER_REQUIRE_LOCAL_MODEL=1
exec .venv/bin/python -m pytest -q "$@"
