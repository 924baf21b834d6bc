#!/usr/bin/env bash
# Make sure a wheel of llama-cpp-python==$LLAMA_CPP_VERSION built for THIS machine's
# CPU exists in the cache, build it (pip wheel --no-deps, ~15-25 min on 2 cores)
# only when it is missing, and print the directory that holds it on stdout.
#
#   pip install --find-links "$(scripts/llama-wheel.sh)" 'llama-cpp-python[server]==0.3.36'
#
# llama.cpp compiles for the CPU it is built on, so a wheel built on one CPU may
# crash with SIGILL on another: the cache is keyed by `uname -m` plus a short hash
# of the CPU flags line of /proc/cpuinfo (and of CMAKE_ARGS, when given).
#
# Env: GATEKEEPER_WHEEL_CACHE (default ~/.cache/gatekeeper/wheels), PYTHON (default:
# python of the active venv, else python3). All chatter goes to stderr.
set -euo pipefail

VERSION="${LLAMA_CPP_VERSION:-0.3.36}"
BASE="${GATEKEEPER_WHEEL_CACHE:-$HOME/.cache/gatekeeper/wheels}"
if [[ -n "${PYTHON:-}" ]]; then
    PY="$PYTHON"
elif [[ -n "${VIRTUAL_ENV:-}" && -x "$VIRTUAL_ENV/bin/python" ]]; then
    PY="$VIRTUAL_ENV/bin/python"
else
    PY="$(command -v python3 || command -v python)"
fi

cpu_key() {
    local flags
    # x86 has "flags : ...", arm64 has "Features : ...".
    flags="$(grep -m1 -E '^(flags|Features)[[:space:]]*:' /proc/cpuinfo 2>/dev/null || true)"
    [[ -n "$flags" ]] || flags="unknown"
    # The build's own flags are part of the key (portable-x86: no AMX, see below), so a wheel
    # built natively by an earlier version of this script is never reused.
    printf '%s-%s-portable' "$(uname -m)" "$(printf '%s %s' "$flags" "${CMAKE_ARGS:-}" | sha256sum | cut -c1-12)"
}

DIR="$BASE/$(cpu_key)"
mkdir -p "$DIR"

have_wheel() {
    # Ask pip itself whether a wheel in DIR fits this interpreter/platform.
    compgen -G "$DIR/llama_cpp_python-$VERSION-*.whl" >/dev/null || return 1
    "$PY" -m pip install --dry-run --quiet --ignore-installed --no-deps --no-index \
        --find-links "$DIR" "llama-cpp-python==$VERSION" >/dev/null 2>&1
}

if ! have_wheel; then
    # Serialise concurrent callers (CI + demo); re-check once the lock is held.
    exec 9>"$DIR/.lock"
    flock 9
    if ! have_wheel; then
        echo "llama-wheel: no llama-cpp-python==$VERSION wheel in $DIR; building (takes a while)..." >&2
        tmp="$(mktemp -d "$DIR/.build.XXXXXX")"
        trap 'rm -rf "$tmp"' EXIT
        # On x86-64, not GGML_NATIVE: -march=native on a CPU that lists AMX compiles AMX tile
        # instructions into the CPU backend, and a kernel or sandbox that has not granted the
        # process AMX state kills it with SIGILL at the first matrix product (seen here on
        # 2026-12-06: `tilezero` in libggml-cpu.so, every completion a dropped connection). AVX2,
        # FMA and F16C are what every x86-64 machine of the last decade has, and all the 270M
        # model needs.
        if [[ "$(uname -m)" == x86_64 && -z "${CMAKE_ARGS:-}" ]]; then
            export CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"
        fi
        "$PY" -m pip wheel --no-deps --no-cache-dir -w "$tmp" "llama-cpp-python==$VERSION" >&2
        # Publish only a complete wheel (rename within one filesystem is atomic).
        for whl in "$tmp"/llama_cpp_python-"$VERSION"-*.whl; do
            mv -f "$whl" "$DIR/"
        done
        have_wheel || { echo "llama-wheel: built wheel is not installable here" >&2; exit 1; }
        echo "llama-wheel: built $(ls "$DIR"/llama_cpp_python-"$VERSION"-*.whl)" >&2
    fi
    flock -u 9
fi

echo "$DIR"
