"""Builds the modules every call runs through as C extensions with mypyc.

The sources stay plain Python (and run as such where they are not built):
mypyc compiles them as they are, checking their annotations at run time.
The list is `[tool.chapline] compiled` in pyproject.toml; `./run` rebuilds
when one of them changes, and the tests refuse to run on extensions older
than their sources (tests/conftest.py reads the digest a build records).
"""

import hashlib
import os
import tomllib

from mypyc.build import mypycify
from setuptools import setup
from setuptools.command.build_ext import build_ext

with open("pyproject.toml", "rb") as f:
    compiled = tomllib.load(f)["tool"]["chapline"]["compiled"]


class BuildAndRecord(build_ext):
    """build_ext, then the digest of the sources it built (only once it succeeded)."""

    def run(self) -> None:
        super().run()
        digest = hashlib.sha256()
        for path in compiled:
            with open(path, "rb") as f:
                digest.update(f.read())
        os.makedirs("build", exist_ok=True)
        with open("build/compiled.sha256", "w") as f:
            f.write(digest.hexdigest())


setup(ext_modules=mypycify(compiled, opt_level="3"), cmdclass={"build_ext": BuildAndRecord})
