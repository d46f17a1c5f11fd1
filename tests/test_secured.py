"""Secured ensembles, on real servers: mutual TLS, SASL DIGEST-MD5 required by the server, digest ACLs.

The TLS and SASL ensembles are the plugin's one-server ``zk_tls_ensemble`` / ``zk_sasl_ensemble``, started
only when the first test here asks for them; digest ACLs run on the session's open ensemble. The CLI runs
in subprocesses as a user runs it; its messages and exit codes (69 unreachable or TLS handshake failed,
77 authentication required or refused, or an ACL says no) are what is asserted.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, ConnectionClosedError, NoAuthError, SessionClosedRequireSaslError
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl
from lockhelpers import children, wait_until

from zkrecipes import FairLock, LeaderElection, ReadWriteLock
from zkrecipes.testing import Ensemble, _secure

_SCRIPT = Path(sys.executable).with_name("zkrecipes")
ZKRECIPES = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "zkrecipes.cli"]
DEADLINE = 30.0
CONNECT_TIMEOUT = 2.0
STARTUP = 15.0  # a Python process starting on a busy 2-core machine, on top of the connect timeout
# a SASL login's refusal comes after the connection and the exchange: seconds on a loaded machine (CI ran
# past 2 s once); a refusal reported as a timeout (exit 69) still fails the test
SASL_CONNECT_TIMEOUT = 10.0

# a command for ``zkrecipes lock``: prints its token, holds until the file in argv[1] exists
HOLD = ("import os, sys, time\nprint('held', os.environ['ZKRECIPES_TOKEN'], flush=True)\n"
        "end = time.monotonic() + 60\nwhile not os.path.exists(sys.argv[1]) and time.monotonic() < end:\n"
        "    time.sleep(0.02)\n")

SECURITY_VARS = ("ZK_HOSTS", "ZK_TLS_CA", "ZK_TLS_CERT", "ZK_TLS_KEY", "ZK_TLS_KEY_PASSWORD", "ZK_SASL_USER",
                 "ZK_SASL_PASSWORD", "ZK_SASL_MECHANISM", "ZK_AUTH", "ZK_AUTH_PASSWORD", "ZKRECIPES_LOG")


def cli_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in SECURITY_VARS}
    env.update(extra)
    return env


def run_cli(*args: str, env: dict | None = None, timeout: float = DEADLINE) -> tuple:
    """Run zkrecipes to its end: (result, seconds it took)."""
    start = time.monotonic()
    try:
        done = subprocess.run(ZKRECIPES + list(args), capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL, env=env if env is not None else cli_env())
    except subprocess.TimeoutExpired:
        pytest.fail(f"zkrecipes {' '.join(args)} did not exit within {timeout} s")
    return done, time.monotonic() - start


def one_line(stderr: str) -> str:
    """The CLI's own error: exactly one 'zkrecipes: ...' line and no traceback."""
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("zkrecipes: "), stderr
    return lines[0]


class Clients:
    """Started KazooClients for one test, chrooted to a fresh namespace; all closed at the end."""

    def __init__(self, hosts: str, **kwargs) -> None:
        self.hosts, self.kwargs = hosts, kwargs
        self.ns = f"/secured-{uuid.uuid4().hex[:8]}"
        self._all: list[KazooClient] = []
        root = self.make(chroot="")
        root.ensure_path(self.ns)

    def make(self, chroot: str | None = None, **kwargs) -> KazooClient:
        kw = dict(self.kwargs, timeout=10.0)
        kw.update(kwargs)
        client = KazooClient(hosts=self.hosts + (self.ns if chroot is None else chroot), **kw)
        self._all.append(client)
        client.start(timeout=DEADLINE)
        return client

    @property
    def chroot_hosts(self) -> str:
        return self.hosts + self.ns

    def close(self) -> None:
        for c in self._all:
            c.stop()
            c.close()


@pytest.fixture(params=["tls", "sasl"])
def secured(request):
    """Clients of the mutual-TLS ensemble (certificate presented) or the SASL one (logged in as bob)."""
    if request.param == "tls":
        ens = request.getfixturevalue("zk_tls_ensemble")
        clients = Clients(ens.secure_hosts, **ens.client_tls)
    else:
        ens = request.getfixturevalue("zk_sasl_ensemble")
        clients = Clients(ens.hosts, **ens.client_sasl("bob"))
    clients.ensemble = ens
    clients.kind = request.param
    yield clients
    clients.close()


def security_args(secured) -> tuple[list, dict]:
    """(CLI options, environment) that give the CLI the same access as ``secured``'s clients."""
    ens = secured.ensemble
    if secured.kind == "tls":
        tls = ens.client_tls
        return ["--tls-ca", tls["ca"], "--tls-cert", tls["certfile"], "--tls-key", tls["keyfile"]], {}
    return ["--sasl-user", "bob"], {"ZK_SASL_PASSWORD": ens.sasl_users["bob"]}


# -- the smoke suite over mutual TLS and over SASL ------------------------------------------------------
def hold_once(lock, got: list) -> None:
    """In a thread: acquire, note (is_held, token), release (a hold belongs to its thread)."""
    if lock.acquire(timeout=DEADLINE):
        got.append((lock.is_held, lock.token))
        lock.release()


def test_fair_lock_hands_over_in_order(secured):
    a, b = secured.make(), secured.make()
    first, second = FairLock(a, "/jobs/nightly", identifier="a"), FairLock(b, "/jobs/nightly", identifier="b")
    assert first.acquire(timeout=DEADLINE)
    got: list = []
    t = threading.Thread(target=hold_once, args=(second, got))
    t.start()
    wait_until(lambda: len(children(a, "/jobs/nightly")) == 2, DEADLINE, "b queues behind a")
    assert got == []
    token = first.token
    first.release()
    t.join(DEADLINE)
    assert got and got[0][0] and got[0][1] > token
    assert children(a, "/jobs/nightly") == []


def test_readers_share_and_a_writer_waits(secured):
    a, b = secured.make(), secured.make()
    ra, rb = ReadWriteLock(a, "/cfg").read(), ReadWriteLock(b, "/cfg").read()
    assert ra.acquire(timeout=DEADLINE) and rb.acquire(timeout=DEADLINE)
    writer = ReadWriteLock(secured.make(), "/cfg").write()
    assert not writer.acquire(blocking=False)
    ra.release()
    rb.release()
    assert writer.acquire(timeout=DEADLINE)
    writer.release()


def test_election_fails_over_when_the_leader_goes(secured):
    a, b = secured.make(), secured.make()
    ea, eb = LeaderElection(a, "/svc/leader", "a"), LeaderElection(b, "/svc/leader", "b")
    assert ea.campaign(timeout=DEADLINE)
    led = threading.Event()
    t = threading.Thread(target=lambda: eb.campaign(timeout=DEADLINE) and led.set())
    t.start()
    wait_until(lambda: len(children(b, "/svc/leader")) == 2, DEADLINE, "b campaigns behind a")
    assert eb.leader().identifier == "a"
    a.stop()  # the leader's session ends
    t.join(DEADLINE)
    assert led.is_set() and eb.is_leader
    eb.resign()


def test_cli_lock_and_status(secured, tmp_path):
    opts, env = security_args(secured)
    done, _ = run_cli("lock", "/jobs/cli", "--hosts", secured.chroot_hosts, *opts, "--",
                      sys.executable, "-c", "import os; print('token', os.environ['ZKRECIPES_TOKEN'])",
                      env=cli_env(**env))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("token ") and int(done.stdout.split()[1]) > 0
    holder = secured.make()
    lock = FairLock(holder, "/jobs/cli", identifier="lib-holder")
    assert lock.acquire(timeout=DEADLINE)
    done, _ = run_cli("status", "/jobs/cli", "--json", "--hosts", secured.chroot_hosts, *opts, env=cli_env(**env))
    assert done.returncode == 0, done.stderr
    assert '"identifier": "lib-holder"' in done.stdout and '"state": "holding"' in done.stdout
    lock.release()


def test_cli_takes_every_setting_from_the_environment(secured):
    ens = secured.ensemble
    if secured.kind == "tls":
        tls = ens.client_tls
        env = {"ZK_TLS_CA": tls["ca"], "ZK_TLS_CERT": tls["certfile"], "ZK_TLS_KEY": tls["keyfile"]}
    else:
        env = {"ZK_SASL_USER": "alice", "ZK_SASL_PASSWORD": ens.sasl_users["alice"], "ZK_SASL_MECHANISM": "DIGEST-MD5"}
    done, _ = run_cli("elect", "/svc/env", "--", sys.executable, "-c", "print('leading')",
                      env=cli_env(ZK_HOSTS=secured.chroot_hosts, **env))
    assert (done.returncode, done.stdout) == (0, "leading\n"), done.stderr


# -- refused clients: the CLI says so, within the connect timeout ----------------------------------------
def test_cli_without_a_client_certificate_is_refused(zk_tls_ensemble):
    done, took = run_cli("lock", "/x", "--hosts", zk_tls_ensemble.secure_hosts, "--tls-ca",
                         zk_tls_ensemble.client_tls["ca"], "--connect-timeout", str(CONNECT_TIMEOUT), "--", "true")
    assert done.returncode == 69
    line = one_line(done.stderr)
    assert line.startswith(f"zkrecipes: cannot reach ZooKeeper at {zk_tls_ensemble.secure_hosts} within 2 s: "
                           "TLS handshake failed"), line
    assert "does the server want a client certificate (--tls-cert/--tls-key)?" in line
    assert took < CONNECT_TIMEOUT + STARTUP


def test_cli_without_tls_on_a_tls_port_is_told_so(zk_tls_ensemble):
    done, took = run_cli("status", "/x", "--hosts", zk_tls_ensemble.secure_hosts,
                         "--connect-timeout", str(CONNECT_TIMEOUT))
    assert done.returncode == 69
    assert one_line(done.stderr) == (f"zkrecipes: cannot reach ZooKeeper at {zk_tls_ensemble.secure_hosts} within "
                                     "2 s: the server closed each connection at once; is it a TLS port (--tls-ca)?")
    assert took < CONNECT_TIMEOUT + STARTUP


def test_cli_with_an_encrypted_key_reads_its_password_from_the_environment(zk_tls_ensemble, tmp_path):
    tls = zk_tls_ensemble.client_tls
    key = tmp_path / "client-encrypted.key"
    subprocess.run(["openssl", "pkey", "-in", tls["keyfile"], "-aes256", "-out", str(key), "-passout", "pass:s3cret"],
                   check=True, capture_output=True)
    args = ["status", "/x", "--hosts", zk_tls_ensemble.secure_hosts, "--tls-ca", tls["ca"],
            "--tls-cert", tls["certfile"], "--tls-key", str(key)]
    done, _ = run_cli(*args)
    assert done.returncode == 2
    assert one_line(done.stderr) == f"zkrecipes: the TLS key '{key}' is encrypted: set ZK_TLS_KEY_PASSWORD"
    done, _ = run_cli(*args, env=cli_env(ZK_TLS_KEY_PASSWORD="wrong"))
    assert done.returncode == 2
    assert "wrong ZK_TLS_KEY_PASSWORD" in one_line(done.stderr)
    done, _ = run_cli(*args, env=cli_env(ZK_TLS_KEY_PASSWORD="s3cret"))
    assert (done.returncode, done.stdout.strip()) == (0, "/x: no holders or waiters"), done.stderr


def test_cli_without_sasl_credentials_is_refused(zk_sasl_ensemble):
    done, took = run_cli("lock", "/x", "--hosts", zk_sasl_ensemble.hosts, "--connect-timeout",
                         str(SASL_CONNECT_TIMEOUT), "--", "true")
    assert done.returncode == 77
    assert one_line(done.stderr) == (f"zkrecipes: authentication required: ZooKeeper at {zk_sasl_ensemble.hosts} "
                                     "requires SASL; set ZK_SASL_USER (or --sasl-user) and ZK_SASL_PASSWORD")
    assert took < SASL_CONNECT_TIMEOUT + STARTUP


@pytest.mark.parametrize("user", ["bob", "mallory"])
def test_cli_with_wrong_sasl_credentials_is_refused(zk_sasl_ensemble, user):
    done, took = run_cli("elect", "/x", "--hosts", zk_sasl_ensemble.hosts, "--sasl-user", user,
                         "--connect-timeout", str(SASL_CONNECT_TIMEOUT), "--", "true",
                         env=cli_env(ZK_SASL_PASSWORD="not-the-password"))
    assert done.returncode == 77
    assert one_line(done.stderr) == (f"zkrecipes: authentication refused: ZooKeeper at {zk_sasl_ensemble.hosts} "
                                     f"rejected the SASL DIGEST-MD5 login of '{user}': wrong user name or password "
                                     "(ZK_SASL_PASSWORD)")
    assert took < SASL_CONNECT_TIMEOUT + STARTUP


def test_a_recipe_on_a_session_without_sasl_raises_the_servers_refusal(zk_sasl_ensemble):
    client = KazooClient(hosts=zk_sasl_ensemble.hosts, timeout=10.0)
    client.start(timeout=DEADLINE)  # the server accepts the connection, then refuses the first request
    try:
        with pytest.raises(SessionClosedRequireSaslError):
            FairLock(client, "/jobs/x").acquire(timeout=DEADLINE)
    finally:
        client.stop()
        client.close()


# kazoo 2.11's I/O thread dies of the server's refusal (fixed upstream in python-zk/kazoo#810)
@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_recipe_on_a_refused_sasl_login_raises_not_times_out(zk_sasl_ensemble):
    client = KazooClient(hosts=zk_sasl_ensemble.hosts, timeout=10.0,
                         sasl_options={"mechanism": "DIGEST-MD5", "username": "bob", "password": "wrong"})
    client.start(timeout=DEADLINE)  # kazoo reports CONNECTED before its SASL exchange, then closes
    try:
        # kazoo 2.11 closes the client on the refusal; later kazoo marks it AUTH_FAILED
        with pytest.raises((ConnectionClosedError, AuthFailedError)):
            FairLock(client, "/jobs/x").acquire(timeout=DEADLINE)
    finally:
        client.stop()
        client.close()


FAST_RECONNECT = {"max_tries": -1, "delay": 0.05, "backoff": 1.5, "max_delay": 0.3}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # kazoo 2.11, see above
def test_a_login_refused_on_reconnecting_ends_holds_and_waits_at_once(tmp_path):
    """The server restarts with bob's password changed: a CLI holder is told its hold is lost (75) and a
    waiting acquire raises, long before their timeouts."""
    ens = Ensemble(size=1, sasl_users={"bob": "old-password"}).start()
    release, holder, waiter_client = tmp_path / "release", None, None
    try:
        script, out, err = tmp_path / "hold.py", tmp_path / "holder.out", tmp_path / "holder.err"
        script.write_text(HOLD)
        with open(out, "w") as o, open(err, "w") as e:
            holder = subprocess.Popen(ZKRECIPES + ["lock", "/q", "--sasl-user", "bob", "--grace", "1", "--",
                                                   sys.executable, str(script), str(release)],
                                      stdout=o, stderr=e, stdin=subprocess.DEVNULL,
                                      env=cli_env(ZK_HOSTS=ens.hosts, ZK_SASL_PASSWORD="old-password"))
        wait_until(lambda: out.read_text().startswith("held"), DEADLINE, "the CLI holds the lock")
        waiter_client = KazooClient(hosts=ens.hosts, timeout=10.0, connection_retry=FAST_RECONNECT,
                                    **ens.client_sasl("bob"))
        waiter_client.start(timeout=DEADLINE)
        outcome: list = []

        def wait() -> None:
            try:
                outcome.append(FairLock(waiter_client, "/q").acquire(timeout=120))
            except Exception as exc:
                outcome.append(exc)

        t = threading.Thread(target=wait)
        t.start()
        wait_until(lambda: len(children(waiter_client, "/q")) == 2, DEADLINE, "the waiter queues")
        _secure.write_jaas(os.path.join(ens.workdir, "jaas.conf"), {"bob": "new-password"})
        ens.stop(0)
        ens.start(0)
        t.join(DEADLINE)
        assert len(outcome) == 1 and isinstance(outcome[0], (ConnectionClosedError, AuthFailedError)), outcome
        assert holder.wait(DEADLINE) == 75
        # the restart puts the hold in doubt first: the command is stopped then, before the refused login
        # is even seen (the doubt clock); a CLI that only noticed the loss would say "gave up reconnecting"
        assert one_line(err.read_text()) in (
            "zkrecipes: the lock on /q fell in doubt (ZooKeeper unreachable or silent): the command was stopped "
            "before the 10 s session could expire",
            "zkrecipes: lost the lock on /q: the ZooKeeper client gave up reconnecting (was its login refused?)")
    finally:
        release.touch()
        if holder is not None and holder.poll() is None:
            holder.kill()
            holder.wait()
        if waiter_client is not None:
            waiter_client.stop()
            waiter_client.close()
        ens.close()


# -- digest ACLs -----------------------------------------------------------------------------------------
TEAM = ("team", "s3cret-team")


def team_acl():
    return list(READ_ACL_UNSAFE) + [make_digest_acl(*TEAM, all=True)]


def test_digest_acl_on_every_node_and_container_parent(zk_factory):
    owner = zk_factory(auth_data=[("digest", ":".join(TEAM))])
    lock = FairLock(owner, "/team/jobs/nightly", identifier="owner", acl=team_acl())
    assert lock.acquire(timeout=DEADLINE)
    for path in ("/team", "/team/jobs", "/team/jobs/nightly", lock.node):
        acls, _ = owner.get_acls(path)
        assert sorted((a.perms, a.id.scheme, a.id.id) for a in acls) == sorted(
            (a.perms, a.id.scheme, a.id.id) for a in team_acl()), path

    intruder = zk_factory()
    assert children(intruder, "/team/jobs/nightly") == [lock.node.rsplit("/", 1)[1]]  # anyone may read
    assert FairLock(intruder, "/team/jobs/nightly").contenders()[0].identifier == "owner"
    with pytest.raises(NoAuthError):
        intruder.delete(lock.node)  # cannot break the holder's lock
    for jumper in (FairLock(intruder, "/team/jobs/nightly"), ReadWriteLock(intruder, "/team/jobs/nightly").read(),
                   LeaderElection(intruder, "/team/jobs/nightly"), FairLock(intruder, "/team/jobs/other")):
        acquire = getattr(jumper, "acquire", None) or jumper.campaign
        with pytest.raises(NoAuthError):  # at once: not a timeout, and nothing queued
            acquire(timeout=DEADLINE)
    assert children(owner, "/team/jobs/nightly") == [lock.node.rsplit("/", 1)[1]]
    assert children(owner, "/team/jobs") == ["nightly"]
    assert lock.is_held

    teammate = zk_factory(auth_data=[("digest", ":".join(TEAM))])
    second = FairLock(teammate, "/team/jobs/nightly", identifier="teammate", acl=team_acl())
    got: list = []
    t = threading.Thread(target=hold_once, args=(second, got))
    t.start()
    wait_until(lambda: len(children(owner, "/team/jobs/nightly")) == 2, DEADLINE, "the teammate queues")
    lock.release()
    t.join(DEADLINE)
    assert got and got[0][0]


def test_cli_digest_identity_guards_the_lock(zk_ensemble, zk_namespace, zk_factory, tmp_path):
    hosts = zk_ensemble.hosts + zk_namespace
    release = tmp_path / "release"
    script = tmp_path / "hold.py"
    script.write_text(HOLD)
    team_env = cli_env(ZK_HOSTS=hosts, ZK_AUTH="digest:" + ":".join(TEAM))
    out = open(tmp_path / "holder.out", "w")
    holder = subprocess.Popen(ZKRECIPES + ["lock", "/locks/deploy", "--identifier", "team-run", "--",
                                           sys.executable, str(script), str(release)],
                              stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=team_env)
    try:
        wait_until(lambda: (tmp_path / "holder.out").read_text().startswith("held"), DEADLINE, "the team holds")

        done, _ = run_cli("lock", "/locks/deploy", "--timeout", "20", "--", "true", env=cli_env(ZK_HOSTS=hosts))
        assert done.returncode == 77
        assert one_line(done.stderr) == (
            "zkrecipes: not authorized: the ACL of /locks/deploy does not allow this for a client with no "
            "credentials; a lock made with a digest identity can be joined or deleted only with the same "
            "--auth digest:USER and password")
        done, _ = run_cli("status", "/locks/deploy", "--json", env=cli_env(ZK_HOSTS=hosts))
        assert done.returncode == 0 and '"identifier": "team-run"' in done.stdout, done.stderr
        node = children(zk_factory(), "/locks/deploy")
        assert len(node) == 1  # the intruder queued nothing
        with pytest.raises(NoAuthError):
            zk_factory().delete(f"/locks/deploy/{node[0]}")

        teammate = subprocess.Popen(
            ZKRECIPES + ["lock", "/locks/deploy", "--auth", "digest:" + TEAM[0], "--", "echo", "teammate ran"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
            env=cli_env(ZK_HOSTS=hosts, ZK_AUTH_PASSWORD=TEAM[1]))
        wait_until(lambda: len(children(zk_factory(), "/locks/deploy")) == 2, DEADLINE, "the teammate queues")
        release.touch()
        stdout, stderr = teammate.communicate(timeout=DEADLINE)
        assert (teammate.returncode, stdout) == (0, "teammate ran\n"), stderr
        assert holder.wait(DEADLINE) == 0
    finally:
        release.touch()
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        out.close()


def test_demo_passes_sasl_and_a_digest_identity_to_its_workers(zk_sasl_ensemble):
    done, _ = run_cli("demo", "--hosts", zk_sasl_ensemble.hosts, "--seconds", "6", "--workers", "2",
                      "--sasl-user", "alice", "--auth", "digest:team", timeout=120,
                      env=cli_env(ZK_SASL_PASSWORD=zk_sasl_ensemble.sasl_users["alice"], ZK_AUTH_PASSWORD=TEAM[1]))
    assert done.returncode == 0, done.stdout + done.stderr
    # workers without the SASL login would be refused by this server: every check passing means they had it
    assert done.stdout.rstrip().endswith("verdict: PASS, every check held")


# -- options refused before any ZooKeeper call --------------------------------------------------------------
@pytest.mark.parametrize("args, env, message", [
    (["--auth", "digest:bob:pw"], {}, "zkrecipes: --auth digest:bob:...: no password on the command line (every "
     "user of the machine can read it); give --auth digest:USER and the password in ZK_AUTH_PASSWORD, or put "
     "digest:USER:PASSWORD in ZK_AUTH"),
    (["--auth", "digest:bob"], {}, "zkrecipes: --auth digest:bob needs its password in ZK_AUTH_PASSWORD"),
    (["--auth", "nocolon"], {}, "zkrecipes: bad --auth 'nocolon': expected SCHEME:CREDENTIAL, e.g. digest:USER"),
    (["--sasl-user", "bob"], {}, "zkrecipes: SASL user 'bob' needs a password in ZK_SASL_PASSWORD (never on the "
     "command line)"),
    (["--sasl-mechanism", "plain"], {}, "zkrecipes: bad --sasl-mechanism/ZK_SASL_MECHANISM 'PLAIN': use one of "
     "DIGEST-MD5, GSSAPI"),
    ([], {"ZK_TLS_CA": "/nonexistent/ca.pem"}, "zkrecipes: bad --tls-ca/ZK_TLS_CA '/nonexistent/ca.pem': no such file"),
    (["--tls-key", __file__], {}, "zkrecipes: --tls-key/ZK_TLS_KEY given without --tls-cert/ZK_TLS_CERT"),
])
def test_bad_security_options_are_usage_errors(args, env, message):
    # the hosts are never contacted: nothing listens on port 1
    done, _ = run_cli("lock", "/x", "--hosts", "127.0.0.1:1", *args, "--", "true", env=cli_env(**env))
    assert (done.returncode, one_line(done.stderr)) == (2, message)


def test_ensemble_checks_its_security_arguments():
    with pytest.raises(ValueError, match="tls must be a bool"):
        Ensemble(size=1, tls="yes")
    with pytest.raises(ValueError, match="bad user name 'b ob'"):
        Ensemble(size=1, sasl_users={"b ob": "pw"})
    ens = Ensemble(size=1)  # not started: only its settings are read
    try:
        with pytest.raises(ValueError, match="without tls=True"):
            _ = ens.client_tls
        with pytest.raises(ValueError, match="without sasl_users"):
            ens.client_sasl()
    finally:
        ens.close()
