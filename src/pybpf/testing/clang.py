"""Compile BPF C sources with clang for tests: ``clang -O2 -g -target bpf -c``.

pybpf needs no compiler at run time; tests that exercise real clang output compile their
sources here, once per source, target and flags (a cache keyed by the source's contents,
so an edited source is rebuilt), and skip with ``CLANG_SKIP_REASON`` where clang is missing.
Headers: libbpf-dev's <bpf/bpf_helpers.h>, and the kernel's uapi <linux/bpf.h> whose
<asm/types.h> lives in the multiarch include directory (/usr/include/x86_64-linux-gnu).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path

CLANG_SKIP_REASON = ("clang is not installed (apt-get install clang libbpf-dev): the BPF C "
                     "corpus cannot be compiled")
_MULTIARCH = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu",
              "riscv64": "riscv64-linux-gnu", "s390x": "s390x-linux-gnu",
              "ppc64le": "powerpc64le-linux-gnu", "loongarch64": "loongarch64-linux-gnu"}


def clang_available() -> bool:
    return shutil.which("clang") is not None and os.path.exists("/usr/include/bpf/bpf_helpers.h")


def include_flags() -> list[str]:
    """-I for the multiarch directory that holds <asm/types.h>, where there is one."""
    multiarch = _MULTIARCH.get(platform.machine(), "")
    directory = f"/usr/include/{multiarch}"
    return [f"-I{directory}"] if multiarch and os.path.isdir(directory) else []


def compile_bpf(source: str | os.PathLike, out_dir: str | os.PathLike | None = None, *,
                target: str = "bpf", flags: tuple[str, ...] = ()) -> Path:
    """The object file of ``source`` (``target`` bpf, bpfel or bpfeb), built if needed.

    Raises ``subprocess.CalledProcessError`` with clang's messages when it fails.
    """
    source = Path(source)
    out_dir = Path(out_dir or Path(tempfile.gettempdir()) / "pybpf-bpf-objects")
    out_dir.mkdir(parents=True, exist_ok=True)
    command = ["clang", "-O2", "-g", "-target", target, *include_flags(), *flags, "-c"]
    key = hashlib.sha256(source.read_bytes() + repr(command).encode()).hexdigest()[:16]
    out = out_dir / f"{source.stem}.{target}.{key}.o"
    if not out.exists():
        partial = out.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run([*command, str(source), "-o", str(partial)], check=True,
                       capture_output=True, text=True)
        partial.replace(out)
    return out
