#!/usr/bin/env bash
# Install what is missing (the test stack on top of the main job's), then run the whole test suite
# (the real local model included).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh test
# The real local model is part of the suite here: its tests must not skip themselves away.
export GATEKEEPER_REQUIRE_LOCAL_MODEL=1
exec .venv/bin/python -m pytest -q "$@"
