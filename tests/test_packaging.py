"""What `pip install chapline` gives: msgspec and nothing else, a core that
loads no optional package, and, for each extra that is missing, an error
naming the `pip install 'chapline[...]'` that fixes it (SPECIFICATION.md,
"Installing").

A wheel of this checkout is built as on a machine without a C compiler
(CC=/bin/false: the build must say it installs pure Python) and installed
into a fresh virtualenv with nothing else; the scripts run there from outside
the checkout, without PYTHONPATH. Building takes PyPI for the build
requirements and installing it for msgspec. The last test runs here, where
every extra is installed: the core still imports none of them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from coordinator.extras import EXTRAS

ROOT = Path(__file__).resolve().parent.parent
# Every package an extra brings that the core must not load (mypy_extensions:
# the compiled modules' decorator, which the core does without).
OPTIONAL = sorted(
    {m for modules in EXTRAS.values() for m in modules}
    | {"httptools", "uvloop", "mypy_extensions"}
)

# Drives a workspace through review on a SqliteStore file and on a
# MemoryStore, reopens the file, and prints what the test checks as JSON.
DRIVE = """
import inspect, json, sys
from coordinator import Coordinator, __version__
from storage import MemoryStore, SqliteStore

def review(coord, ws):
    sent = 0
    def call(method, **params):
        nonlocal sent
        sent += 1
        envelope = {"jsonrpc": "2.0", "id": str(sent), "method": method,
                    "params": {"workspace": ws, **params}}
        response = coord.dispatch(envelope)
        assert "result" in response, response
        return response["result"]
    call("workspace.create", **{"from": "human:alice", "profiles": ["core/1.0", "review/1.0"]})
    call("participant.join", **{"from": "human:alice", "type": "human", "role": "admin"})
    call("participant.join", **{"from": "agent:bot", "type": "agent"})
    task = call("task.create", **{"from": "human:alice", "assignee": "agent:bot", "kind": "draft",
                                  "input": {"topic": "Q3"}, "review_required": True})["task_id"]
    call("task.complete", **{"from": "agent:bot", "task_id": task, "output": {"text": "draft"}})
    assert call("decide.approve", **{"from": "human:alice", "task_id": task}) == {"state": "completed"}
    return task

with Coordinator(store=SqliteStore(sys.argv[1])) as coord:
    task = review(coord, "wsp_file")
    head = coord.workspaces["wsp_file"].chain_head
with Coordinator(store=SqliteStore(sys.argv[1])) as coord:
    reopened = coord.workspaces["wsp_file"]
    assert reopened.chain_head == head and reopened.tasks[task].state == "completed"
    assert len(reopened.audit) == 6
memory = Coordinator(store=MemoryStore())
review(memory, "wsp_memory")

print(json.dumps({
    "version": __version__,
    "head": head,
    "memory_entries": len(memory.workspaces["wsp_memory"].audit),
    "loaded": sorted(m for m in {optional} if m in sys.modules),
    "doc": Coordinator.__doc__,
    "signature": str(inspect.signature(Coordinator)),
}))
"""

# Each use that needs a missing extra, and what it raised or answered.
MISSING = """
import json
from coordinator import Coordinator, sign_envelope
from coordinator.extras import MissingExtraError

said = {}

def refused(name, use):
    try:
        use()
    except MissingExtraError as missing:
        said[name] = [missing.extra, missing.module, missing.remedy, str(missing)]
    else:
        said[name] = None

def postgres():
    import storage
    storage.PostgresStore("postgresql://chap@localhost/chap")

def oidc():
    from coordinator.security.identity_verifiers import OidcVerifier
    OidcVerifier({"keys": []}, issuer="https://id.example", audience="chap")

refused("PostgresStore", postgres)
refused("sign_envelope", lambda: sign_envelope({"jsonrpc": "2.0"}, bytes(32), "k1"))
refused("OidcVerifier", oidc)
refused("transparency", lambda: __import__("coordinator.security.transparency"))

coord = Coordinator()
create = {"jsonrpc": "2.0", "id": "1", "method": "workspace.create",
          "params": {"workspace": "wsp_signed", "from": "human:alice",
                     "profiles": ["core/1.0", "security-signed/1.0"]}}
said["advertised"] = coord.dispatch(create)["error"]
create["params"].pop("profiles")
said["enforced"] = Coordinator(require_signatures=True).dispatch(create)["error"]
try:
    Coordinator(default_profiles=["core/1.0", "audit-scitt/1.0"])
except ValueError as refusal:
    said["default_profiles"] = str(refusal)
print(json.dumps(said))
"""


def _run(
    command: list[str], *, cwd: Path, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment, without what would point Python at the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CHAPLINE_PURE")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return {**env, **extra}


class _Installed:
    """The wheel and the virtualenv it was installed into, alone."""

    def __init__(self, wheel: Path, said: str, venv: Path, home: Path) -> None:
        self.wheel = wheel
        self.said = said  # what pip and setup.py printed while building
        self.python = venv / "bin" / "python"
        self.chapline = venv / "bin" / "chapline"
        self.home = home  # outside the checkout: where the scripts run

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return _run([*args], cwd=self.home, env=_clean_env(), timeout=timeout)

    def script(self, code: str, *args: str) -> dict[str, object]:
        done = self.run(str(self.python), "-c", code, *args)
        assert done.returncode == 0, done.stderr
        result: dict[str, object] = json.loads(done.stdout)
        return result


@pytest.fixture(scope="module")
def core_only(tmp_path_factory: pytest.TempPathFactory) -> _Installed:
    """The wheel, built without a compiler, installed alone in a fresh virtualenv."""
    where = tmp_path_factory.mktemp("packaging")
    # A copy of the sources, so that the build writes nothing into the checkout.
    source = where / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".*", "build", "dist", "*.egg-info", "__pycache__", "*.so", "*.db*", "tests", "bench", "docs"
        ),
    )
    dist = where / "dist"
    built = _run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-w", str(dist), "-v"],
        cwd=where,
        env=_clean_env(CC="/bin/false"),
        timeout=900,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("*.whl")
    venv = where / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)], cwd=where, env=_clean_env())
    assert made.returncode == 0, made.stderr
    home = where / "home"
    home.mkdir()
    done = _Installed(wheel, built.stdout + built.stderr, venv, home)
    added = done.run(str(done.python), "-m", "pip", "install", "-q", str(wheel), timeout=600)
    assert added.returncode == 0, added.stderr
    return done


def test_without_a_compiler_the_wheel_is_pure_python_and_the_build_says_so(
    core_only: _Installed,
) -> None:
    assert core_only.wheel.name.endswith("-py3-none-any.whl"), core_only.wheel.name
    with zipfile.ZipFile(core_only.wheel) as wheel:
        names = wheel.namelist()
    assert [n for n in names if n.endswith((".so", ".pyd", ".c"))] == []
    assert "coordinator/engine/pipeline.py" in names and "storage/memory.py" in names
    assert "chapline: no C compiler can build a Python extension here" in core_only.said
    assert "installing pure Python" in core_only.said


def test_installing_it_pulls_msgspec_alone(core_only: _Installed) -> None:
    listed = core_only.run(str(core_only.python), "-m", "pip", "list", "--format=json")
    assert listed.returncode == 0, listed.stderr
    names = {p["name"].lower() for p in json.loads(listed.stdout)}
    assert names - {"pip", "setuptools"} == {"chapline", "msgspec"}


def test_the_core_alone_drives_workspaces_in_memory_and_in_a_sqlite_file(
    core_only: _Installed,
) -> None:
    said = core_only.script(
        DRIVE.replace("{optional}", repr(set(OPTIONAL))), str(core_only.home / "chap.db")
    )
    assert said["loaded"] == []
    assert str(said["head"]).startswith("sha256:") and said["memory_entries"] == 6
    # What help() and a framework wrapping the constructor read.
    assert said["doc"] and "dispatch" in str(said["doc"])
    assert "store" in str(said["signature"])


def test_each_missing_extra_is_an_error_naming_the_pip_command_that_fixes_it(
    core_only: _Installed,
) -> None:
    said = core_only.script(MISSING)
    crypto = "pip install 'chapline[crypto]'"
    for name, extra in [
        ("PostgresStore", "postgres"),
        ("sign_envelope", "crypto"),
        ("OidcVerifier", "crypto"),
        ("transparency", "crypto"),
    ]:
        raised = said[name]
        assert isinstance(raised, list), (name, raised)
        assert raised[0] == extra and raised[2] == f"pip install 'chapline[{extra}]'", raised
        assert raised[2] in raised[3], raised
    # A profile whose extra is missing is not advertised: naming it is -32602.
    advertised = said["advertised"]
    assert isinstance(advertised, dict)
    assert advertised["code"] == -32602 and crypto in advertised["message"], advertised
    enforced = said["enforced"]
    assert isinstance(enforced, dict)
    assert enforced["code"] == -32602 and "security-signed/1.0" in enforced["message"]
    assert crypto in enforced["message"], enforced
    assert crypto in str(said["default_profiles"]) and "audit-scitt/1.0" in str(said["default_profiles"])


def test_serve_and_mcp_without_their_extras_exit_2_naming_the_pip_command(
    core_only: _Installed,
) -> None:
    for command, extra in [("serve", "server"), ("mcp", "mcp")]:
        done = core_only.run(str(core_only.chapline), command, "--db", ":memory:", "--port", "0")
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert f"pip install 'chapline[{extra}]'" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and done.stdout == ""


def test_the_log_commands_and_tokens_work_with_the_core_alone(core_only: _Installed) -> None:
    version = core_only.run(str(core_only.chapline), "--version")
    assert version.returncode == 0 and version.stdout.startswith("chapline "), version
    db = str(core_only.home / "log.db")
    joined = core_only.run(
        str(core_only.python),
        "-c",
        "import sys; from coordinator import Coordinator; from storage import SqliteStore\n"
        "with Coordinator(store=SqliteStore(sys.argv[1])) as c:\n"
        "    c.dispatch({'jsonrpc': '2.0', 'id': '1', 'method': 'participant.join', 'params':"
        " {'workspace': 'wsp_log', 'from': 'human:alice', 'type': 'human'}})",
        db,
    )
    assert joined.returncode == 0, joined.stderr
    # Without rich (chapline[cli]), tables are plain columns.
    verified = core_only.run(str(core_only.chapline), "verify", db)
    assert verified.returncode == 0, verified.stderr
    assert verified.stdout.splitlines()[1].split() == ["workspace", "entries", "head", "verdict"]
    assert verified.stdout.splitlines()[2].split()[::3] == ["wsp_log", "ok"]
    inspected = core_only.run(str(core_only.chapline), "inspect", db)
    assert inspected.returncode == 0 and "wsp_log" in inspected.stdout, inspected.stderr
    token = core_only.run(str(core_only.chapline), "token", "create", "--db", db, "--as", "human:alice",
                         "--all-workspaces")
    assert token.returncode == 0 and token.stdout.startswith("chl_"), token.stderr
    postgres = core_only.run(str(core_only.chapline), "verify", "postgresql://chap@localhost/chap")
    assert postgres.returncode == 2 and "pip install 'chapline[postgres]'" in postgres.stderr


def test_importing_the_core_loads_no_optional_package_even_where_all_are_installed(
    tmp_path: Path,
) -> None:
    # Here every extra is installed: the core must still not import them
    # (each costs start-up time, and they are not what an embedder asked for).
    code = textwrap.dedent(
        """
        import json, sys
        import coordinator
        from coordinator import Coordinator
        from storage import MemoryStore, SqliteStore
        for store in (MemoryStore(), SqliteStore(sys.argv[1])):
            with Coordinator(store=store) as coord:
                answer = coord.dispatch({"jsonrpc": "2.0", "id": "1", "method": "participant.join",
                    "params": {"workspace": "wsp_a", "from": "human:alice", "type": "human"}})
                assert "result" in answer, answer
                coord.dispatch({"jsonrpc": "2.0", "id": "2", "method": "task.create",
                    "params": {"workspace": "wsp_a", "from": "human:alice",
                               "assignee": "human:alice", "kind": "k", "input": {}}})
        print(json.dumps(sorted(sys.modules)))
        """
    )
    done = _run([sys.executable, "-c", code, str(tmp_path / "a.db")], cwd=tmp_path, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    loaded = set(json.loads(done.stdout))
    assert [m for m in OPTIONAL if m in loaded] == []
