#!/usr/bin/env bash
# Idempotent set-up for a fresh machine of this kind (Debian/Ubuntu): packages and mounts (as
# root), then the package itself in a project virtual environment, .venv, which run.sh and
# test.sh use. A venv works on a stock Debian/Ubuntu Python (PEP 668 refuses pip into the
# system one) and on any other python3. Safe to run again: it does nothing when all is there.
# PYTHON picks the interpreter the venv is made from (default: python3).
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # gcc and libbpf-dev build the C references of the benchmarks; python3-venv and
    # python3-dev make the venv and build the C extensions (accelerator, shared maps, cache
    # model) on the distribution's Python; clang and llvm build BPF C objects; bpftool
    # cross-checks what the kernel reports; iproute2, iperf3, xdp-tools and ethtool drive
    # the network benchmarks.
    need=()
    for pkg in gcc libbpf-dev bpftool iproute2 python3-venv python3-dev clang llvm iperf3 \
               xdp-tools ethtool; do
        dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
    done
    if [ "${#need[@]}" -gt 0 ]; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    fi
    # bpffs for pinning, tracefs for tracepoint attachment.
    mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf || true
    mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing || true
fi

# The package, editable, with the C extensions and the test and plot extras. The stamp holds
# a hash of what the install depends on, so a second run installs nothing.
venv=.venv
stamp="$venv/.pybpf-installed"
want="$(cat pyproject.toml setup.py src/pybpf/*.c src/pybpf/*.h | sha256sum | cut -d' ' -f1)"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c '' 2>/dev/null; then
    rm -rf "$venv"
    if ! "${PYTHON:-python3}" -m venv "$venv"; then
        echo "setup: cannot make a venv with ${PYTHON:-python3}; install python3-venv" \
             "(apt-get install python3-venv) or set PYTHON to another interpreter" >&2
        exit 1
    fi
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$venv/bin/python" -m pip install -q -e '.[test,plot]'
    # setuptools leaves its egg-info next to the sources; the install does not need it, and
    # left there (root-owned after a root set-up) it breaks a later pip install by another user.
    rm -rf src/pybpf.egg-info
    echo "$want" > "$stamp"
fi
