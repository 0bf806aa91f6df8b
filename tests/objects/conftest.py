"""The BPF C corpus (tests/objects/*.c), compiled once per session with clang."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pybpf.testing.clang import CLANG_SKIP_REASON, clang_available, compile_bpf

CORPUS_DIR = Path(__file__).parent
CORPUS = sorted(path.stem for path in CORPUS_DIR.glob("*.c"))


@pytest.fixture(scope="session")
def build_object(tmp_path_factory) -> Callable[..., Path]:
    """``build_object(name, target="bpf")``: the object file of tests/objects/<name>.c."""
    if not clang_available():
        pytest.skip(CLANG_SKIP_REASON)
    out = tmp_path_factory.mktemp("bpf-objects")

    def build(name: str, target: str = "bpf") -> Path:
        return compile_bpf(CORPUS_DIR / f"{name}.c", out, target=target)

    return build


@pytest.fixture(scope="session")
def compile_source(tmp_path_factory) -> Callable[[str, str], Path]:
    """``compile_source(name, c_text)``: compile a C snippet written by a test."""
    if not clang_available():
        pytest.skip(CLANG_SKIP_REASON)
    out = tmp_path_factory.mktemp("bpf-snippets")

    def build(name: str, text: str) -> Path:
        source = out / f"{name}.c"
        source.write_text("#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n" + text)
        return compile_bpf(source, out)

    return build


def need_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (apt-get install llvm bpftool): the cross-check "
                    "against it cannot run")
    return path
