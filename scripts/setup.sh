#!/usr/bin/env bash
# Idempotent set-up for a fresh machine of this kind (Debian, root): packages, mounts, the
# package itself. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    # gcc and libbpf-dev build the optional C references of the benchmarks; bpftool is used
    # by tests to cross-check what the kernel reports; clang compiles the BPF C corpus of
    # tests/objects, and llvm's readobj/objdump cross-check how pybpf reads the objects.
    need=()
    for pkg in gcc libbpf-dev bpftool iproute2 clang llvm; do
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

python3 -m pip install -q -e '.[test,plot]'
