"""A throwaway PostgreSQL server for the tests: initdb and pg_ctl in a temp dir.

The server listens on a unix socket in its own directory and on 127.0.0.1 at
a free port. Facts of the machines this runs on (development and CI alike):

- `initdb` and `postgres` refuse to run as root, and the suite runs as root:
  the server then runs as the `postgres` system user the Debian package made.
- pytest's `tmp_path` is under directories only root can enter, so the
  cluster gets its own `mkdtemp()` in the system temp dir, owned by that user.
- Only the C and C.utf8 locales exist: `--locale=C -E UTF8`.
- `pg_ctl start` detaches the server, so a killed test run leaves it running;
  every cluster dir records the pid of the run that made it, and a later run
  stops the servers of runs that are gone (by data dir), then removes them.
  A stopped server can linger as a zombie: a zombie is not a live server.

When the binaries are missing the server cannot start, and `PgServer.start`
raises with the remedy: tests fail, they do not skip.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

__all__ = ["PgServer", "PgServerError", "stop_stale_servers"]

_PREFIX = "chapline-pg-"
_OWNER_FILE = "owner.pid"


class PgServerError(RuntimeError):
    """The test server could not be started or stopped."""


def _bindir() -> Path:
    """Where initdb and pg_ctl are: PATH first, then Debian's versioned dirs."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0,
    )
    if versions:
        return Path(versions[-1]).parent
    raise PgServerError(
        "PostgreSQL's server binaries (initdb, pg_ctl) are not installed, so the "
        "PostgresStore tests cannot run. Install them: `apt-get install -y postgresql` "
        "(.ci/run does this on a fresh machine)."
    )


def _clean_env() -> dict[str, str]:
    """The environment without PG* variables, so nothing outside points the
    tools at another server, user or password file."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PG")}


def _alive(pid: int) -> bool:
    """True if `pid` runs and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # The state follows the parenthesised command name, which may hold spaces.
    return stat[stat.rindex(b")") + 2 : stat.rindex(b")") + 3] not in (b"Z", b"X")


class PgServer:
    """One cluster: `start()`, `stop(mode)`, `start()` again, `remove()`.

    `dsn(dbname)` and `uri(dbname)` name a database on it (superuser
    `postgres`, trust authentication on the socket and 127.0.0.1 only).
    """

    def __init__(self) -> None:
        self.bindir = _bindir()
        self._user: pwd.struct_passwd | None = None
        if os.geteuid() == 0:
            try:
                self._user = pwd.getpwnam("postgres")
            except KeyError:
                raise PgServerError(
                    "the tests run as root, and PostgreSQL refuses to run as root, but "
                    "there is no `postgres` user to run it as; install the Debian "
                    "package (`apt-get install -y postgresql`), which creates it"
                ) from None
        self.dir = Path(tempfile.mkdtemp(prefix=_PREFIX, dir=tempfile.gettempdir()))
        (self.dir / _OWNER_FILE).write_text(str(os.getpid()))
        if self._user is not None:
            os.chown(self.dir, self._user.pw_uid, self._user.pw_gid)
        os.chmod(self.dir, 0o700)
        self.data = self.dir / "data"
        self.socket_dir = str(self.dir)
        if len(self.socket_dir) + len("/.s.PGSQL.65535") >= 107:
            raise PgServerError(f"the socket path under {self.socket_dir} would exceed 107 bytes")
        self.port = _free_port()
        self._started = False
        self._initdb()

    # -- running the tools as the server's user ----------------------------

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        kwargs: dict[str, Any] = {}
        if self._user is not None:
            kwargs.update(user=self._user.pw_uid, group=self._user.pw_gid, extra_groups=[])
        result = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            env=_clean_env(),
            cwd=self.dir,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            timeout=120,
            **kwargs,
        )
        if check and result.returncode != 0:
            raise PgServerError(
                f"{args[0]} failed ({result.returncode}): {result.stderr.strip() or result.stdout.strip()}"
                + self._log_tail()
            )
        return result

    def _log_tail(self) -> str:
        try:
            lines = (self.dir / "server.log").read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\nserver log:\n" + "\n".join(lines[-15:])

    def _initdb(self) -> None:
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
            "--locale=C", "-E", "UTF8", "--no-sync",
        )

    # -- the server ---------------------------------------------------------

    def start(self, *, durable: bool = False) -> None:
        """Start the server. Unless `durable`, with fsync=off: the tests stop
        the server, never the machine, and every commit still reaches the OS
        before it is acknowledged, which is all an immediate stop (or a killed
        server) can observe. Benchmarks want `durable`: a sync per commit."""
        for attempt in range(3):
            options = (
                f"-c listen_addresses=127.0.0.1 -c port={self.port} "
                f"-c unix_socket_directories={self.socket_dir} "
                "-c max_connections=200 -c shared_buffers=64MB"
            )
            if not durable:
                options += " -c fsync=off -c full_page_writes=off"
            try:
                self._run(
                    "pg_ctl", "start", "-w", "-t", "60", "-D", str(self.data),
                    "-l", str(self.dir / "server.log"), "-o", options,
                )
                break
            except PgServerError as exc:
                # The port was free when picked; another process (a parallel
                # test worker) may have taken it since. Only a first start
                # moves: a restarted server keeps the port its clients know.
                if self._started or attempt == 2 or "Address already in use" not in str(exc):
                    raise
                self.port = _free_port()
        self._started = True

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "stop", "-w", "-t", "60", "-D", str(self.data), "-m", mode, check=False)

    def running(self) -> bool:
        pid = _postmaster_pid(self.data)
        return pid is not None and _alive(pid)

    def remove(self) -> None:
        if self.running():
            self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- connecting ---------------------------------------------------------

    def dsn(self, dbname: str = "postgres", *, user: str = "postgres", **options: str) -> str:
        """A libpq key=value string for `dbname` over the unix socket."""
        parts = [f"host={self.socket_dir}", f"port={self.port}", f"user={user}", f"dbname={dbname}"]
        parts += [f"{k}='{v}'" for k, v in options.items()]
        return " ".join(parts)

    def uri(self, dbname: str = "postgres", *, user: str = "postgres") -> str:
        """A postgresql:// URI for `dbname` over TCP on 127.0.0.1."""
        return f"postgresql://{user}@127.0.0.1:{self.port}/{dbname}"

    def new_database(self, encoding: str = "UTF8") -> str:
        """Create an empty database in `encoding` (the cluster's C locale
        takes any; SQL_ASCII is what a plain `initdb --locale=C` makes);
        return its name."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE \"{name}\" ENCODING '{encoding}' TEMPLATE template0")
        return name


def _postmaster_pid(data: Path) -> int | None:
    try:
        first = (data / "postmaster.pid").read_text().split("\n", 1)[0]
        return int(first)
    except (OSError, ValueError):
        return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_stale_servers() -> None:
    """Stop and remove the clusters of test runs that are gone (killed runs
    leave their detached servers behind); never touch a live run's."""
    for directory in glob.glob(os.path.join(tempfile.gettempdir(), _PREFIX + "*")):
        path = Path(directory)
        try:
            owner = int((path / _OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if _alive(owner):
            continue
        pid = _postmaster_pid(path / "data")
        if pid is not None and _alive(pid):
            try:
                server = PgServer.__new__(PgServer)
                server.bindir = _bindir()
                server.dir, server.data = path, path / "data"
                server._user = None
                if os.geteuid() == 0:
                    server._user = pwd.getpwnam("postgres")
                server.stop("immediate")
            except (PgServerError, KeyError, OSError):
                pass
        shutil.rmtree(path, ignore_errors=True)
