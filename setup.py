"""Builds chapline: the hot path compiled with mypyc when it can be, plain Python when not.

What is compiled is `[tool.chapline] compiled` in pyproject.toml: folders
(every module in them but `__init__.py`) and single modules. The sources stay
ordinary Python and behave the same either way; compiled, a call costs about
a third fewer instructions (bench/README.md).

Installed as pure Python, saying so, when
- CHAPLINE_PURE=1 is set, or
- no C compiler that can build a Python extension is found (a probe compiles a
  one-line extension source first), or
- mypyc is not importable.

A successful compiled build records the digest of its sources in
build/compiled.sha256, which the tests compare with the sources
(tests/conftest.py) so that they never run against stale extensions.
"""

from __future__ import annotations

import hashlib
import os
import sys
import sysconfig
import tempfile
import tomllib
from pathlib import Path

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def compiled_sources() -> list[str]:
    """The listed modules, folders expanded, as sorted relative paths."""
    with open(ROOT / "pyproject.toml", "rb") as f:
        listed: list[str] = tomllib.load(f)["tool"]["chapline"]["compiled"]
    paths: set[str] = set()
    for entry in listed:
        where = ROOT / entry
        if where.is_dir():
            paths.update(str(p.relative_to(ROOT)) for p in where.glob("*.py") if p.name != "__init__.py")
        else:
            paths.add(entry)
    return sorted(paths)


def _say(message: str) -> None:
    print(f"chapline: {message}", file=sys.stderr)


def compiler_problem() -> str | None:
    """Why no extension can be built here, or None when one can."""
    from setuptools._distutils.ccompiler import new_compiler
    from setuptools._distutils.errors import CCompilerError, DistutilsError
    from setuptools._distutils.sysconfig import customize_compiler

    compiler = new_compiler()
    customize_compiler(compiler)
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp, "probe.c")
        source.write_text("#include <Python.h>\nint chapline_probe(void) { return 0; }\n")
        try:
            compiler.compile(
                [str(source)], output_dir=tmp, include_dirs=[sysconfig.get_paths()["include"]]
            )
        except (CCompilerError, DistutilsError, OSError) as exc:
            return f"no C compiler can build a Python extension here ({str(exc)[:200]})"
    return None


def extensions() -> list:
    if os.environ.get("CHAPLINE_PURE") == "1":
        _say("CHAPLINE_PURE=1: installing pure Python (the same behaviour, slower calls)")
        return []
    problem = compiler_problem()
    if problem is not None:
        _say(f"{problem}: installing pure Python (the same behaviour, slower calls)")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _say("mypyc is not importable: installing pure Python (the same behaviour, slower calls)")
        return []
    _say("compiling the hot path with mypyc (CHAPLINE_PURE=1 installs pure Python)")
    # group_name: mypyc's shared runtime is one top-level module named for the
    # project (not a hash); a dotted name would give the compiled modules a
    # wrong __file__.
    return mypycify(compiled_sources(), opt_level="3", group_name="chapline")


class BuildAndRecord(build_ext):
    """build_ext, then the digest of the sources it built (only once it succeeded)."""

    def run(self) -> None:
        super().run()
        if not self.extensions:
            return
        digest = hashlib.sha256()
        for path in compiled_sources():
            digest.update((ROOT / path).read_bytes())
        os.makedirs(ROOT / "build", exist_ok=True)
        (ROOT / "build" / "compiled.sha256").write_text(digest.hexdigest())


# Run by the build (as __main__); imported only for `compiled_sources` (./run, tests/build_sources.py).
if __name__ == "__main__":
    setup(ext_modules=extensions(), cmdclass={"build_ext": BuildAndRecord})
