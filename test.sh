#!/usr/bin/env bash
# Install what is missing, then run the whole test suite (the real local model included).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
