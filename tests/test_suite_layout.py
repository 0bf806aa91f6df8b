"""The test suite's own layout: pytest imports a test module in a folder without an
``__init__.py`` by its file name alone, so two such modules with one name stop the collection
of the whole suite ("import file mismatch")."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_test_modules_outside_packages_have_unique_names():
    folders_by_name: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        if not (path.parent / "__init__.py").exists():
            folders_by_name[path.name].append(str(path.parent.relative_to(TESTS)))
    clashes = {name: folders for name, folders in folders_by_name.items() if len(folders) > 1}
    assert not clashes, f"rename one of each (or make its folder a package): {clashes}"
