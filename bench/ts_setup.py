"""Build the TypeScript coordinator for the bench from a fetched CHAP repository.

    python -m bench.ts_setup /path/to/chap [--out .bench-ts]

Copies the repository's packages/coordinator into OUT/coordinator (OUT is
git-ignored; nothing of the repository enters this project), installs its
build tools with npm and builds it with its own `npm run build`. Then
`python -m bench --ts OUT` runs it. OUT/source.json records what was built.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def build(chap: Path, out: Path) -> dict[str, str]:
    src = chap / "packages" / "coordinator"
    if not (src / "package.json").is_file():
        raise SystemExit(f"{chap}: no packages/coordinator/package.json (a checkout of BrightbeamAI/chap?)")
    dest = out / "coordinator"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns("node_modules", "dist"))
    # No install scripts: the only one that matters is better-sqlite3's native
    # build, and the bench runs the coordinator in memory.
    subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=dest, check=True)
    subprocess.run(["npm", "run", "build"], cwd=dest, check=True)
    commit = subprocess.run(["git", "-C", str(chap), "rev-parse", "HEAD"], capture_output=True, text=True)
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True)
    source = {
        "chap": str(chap.resolve()),
        "commit": commit.stdout.strip() if commit.returncode == 0 else "unknown (not a git checkout)",
        "version": json.loads((dest / "package.json").read_text())["version"],
        "node": node.stdout.strip(),
    }
    (out / "source.json").write_text(json.dumps(source, indent=1) + "\n")
    return source


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.ts_setup", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chap", type=Path, help="a fetched CHAP repository (BrightbeamAI/chap)")
    ap.add_argument("--out", type=Path, default=ROOT / ".bench-ts", help="build here (default .bench-ts)")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    source = build(args.chap, args.out)
    print(f"built the TypeScript coordinator {source['version']} ({source['commit']}, node {source['node']}) "
          f"into {args.out}; run: python -m bench --ts {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
