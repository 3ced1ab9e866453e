"""The layout README.md draws is the one on disk (SPECIFICATION.md, "Build and
layout"): every folder of the tree exists and every folder that holds files
is drawn, so a newcomer finds each room where the README says; and the
module paths README.md showed before the folders still import."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# What a build or a run leaves beside the sources (and hidden folders, such as
# tool caches), not part of the layout.
NOT_DRAWN = {"__pycache__", "build", "dist", "artifacts"}  # artifacts: the browser tests' screenshots


def drawn_folders() -> set[str]:
    """The folders of the tree under README.md's "Layout", as paths."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    tree = section.split("```\n", 2)[1]
    folders: set[str] = set()
    parents: list[str] = []
    for line in tree.splitlines():
        match = re.match(r"( *)(\S+)/ ", line)
        assert match, f"a tree line that names no folder: {line!r}"
        depth = len(match.group(1)) // 2
        parents[depth:] = [match.group(2)]
        folders.add("/".join(parents))
    return folders


def folders_on_disk(roots: set[str]) -> set[str]:
    """Every folder under the drawn top-level folders that holds a file."""
    found: set[str] = set()
    for root in roots:
        for path in (ROOT / root).rglob("*"):
            parts = path.relative_to(ROOT).parts
            hidden = any(part.startswith(".") for part in parts[1:])
            made = NOT_DRAWN.intersection(parts) or any(p.endswith(".egg-info") for p in parts)
            if path.is_file() and not hidden and not made:
                found.add("/".join(parts[:-1]))
    return found


def test_the_readme_tree_is_the_folders_on_disk() -> None:
    drawn = drawn_folders()
    top = {folder for folder in drawn if "/" not in folder}
    assert {"coordinator", "storage", "tests", "bench"} <= top
    assert drawn == folders_on_disk(top)


@pytest.mark.parametrize(
    ("old", "home", "names"),
    [
        ("coordinator.verifiers", "coordinator.security.identity_verifiers",
         ["OidcVerifier", "VcVerifier", "IdentityRejected"]),
        ("coordinator.inward", "coordinator.server.inward",
         ["wrap_mcp_tool_call", "wrap_a2a_message_exchange", "content_hash"]),
    ],
)
def test_a_path_the_readme_showed_before_the_folders_still_imports(
    old: str, home: str, names: list[str]
) -> None:
    before, now = importlib.import_module(old), importlib.import_module(home)
    assert set(now.__all__) <= set(before.__all__)
    for name in names:
        assert getattr(before, name) is getattr(now, name)
