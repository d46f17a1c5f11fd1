"""How the command line reaches a secured ensemble: TLS, SASL and digest identities taken from options and
the environment, the ACL of the nodes it creates, and connection failures told in one line.

Every option has an environment variable; passwords come only from the environment (a command line is
visible to every user of the machine). Failures: :class:`ConnectError` with exit code 2 (bad option or
file, before any ZooKeeper call), 69 (unreachable, TLS handshake failed, SASL library missing) or 77
(authentication required, refused, or not authorized by an ACL).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import os
import re
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    NoAuthError,
    SASLException,
    SessionClosedRequireSaslError,
)
from kazoo.security import ACL, READ_ACL_UNSAFE, make_digest_acl

from ._drive import Driver, never
from ._steps import DeadlinePassed, Read, Steps

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 69
EXIT_NOPERM = 77

MECHANISMS = ("DIGEST-MD5", "GSSAPI")

log = logging.getLogger("zkrecipes.cli")


class ConnectError(Exception):
    """A connection or security failure to report as one line and an exit code."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Security:
    """TLS files, SASL login and ``add_auth`` credentials of one client; empty means an open ensemble."""

    tls_ca: Optional[str] = None
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    tls_key_password: Optional[str] = field(default=None, repr=False)
    sasl_mechanism: Optional[str] = None  # None: no SASL
    sasl_user: Optional[str] = None
    sasl_password: Optional[str] = field(default=None, repr=False)
    auth: Tuple[Tuple[str, str], ...] = field(default=(), repr=False)  # (scheme, credential) for add_auth

    @property
    def tls(self) -> bool:
        return bool(self.tls_ca or self.tls_cert or self.tls_key)

    def digest_identity(self) -> Optional[Tuple[str, str]]:
        """(user, password) of the first ``digest`` credential, if any."""
        for scheme, cred in self.auth:
            if scheme == "digest":
                user, _, password = cred.partition(":")
                return user, password
        return None

    def acl(self) -> Optional[List[ACL]]:
        """With a digest identity: everyone may read, only that identity may do anything else. Else None
        (the library's default, open ACL)."""
        ident = self.digest_identity()
        if ident is None:
            return None
        return list(READ_ACL_UNSAFE) + [make_digest_acl(ident[0], ident[1], all=True)]

    def kazoo_kwargs(self) -> Dict[str, Any]:
        """KazooClient keyword arguments (``use_ssl``, ``ca``, ``certfile``, ``keyfile``, ``keyfile_password``,
        ``sasl_options``, ``auth_data``)."""
        kw: Dict[str, Any] = {}
        if self.tls:
            kw.update(use_ssl=True, ca=self.tls_ca, verify_certs=True)
            if self.tls_cert:  # kazoo loads a client certificate only when given both files
                kw.update(certfile=self.tls_cert, keyfile=self.tls_key or self.tls_cert,
                          keyfile_password=self.tls_key_password)
        if self.sasl_mechanism:
            opts: Dict[str, Any] = {"mechanism": self.sasl_mechanism}
            if self.sasl_mechanism == "DIGEST-MD5":
                opts.update(username=self.sasl_user, password=self.sasl_password)
            elif self.sasl_user:
                opts["principal"] = self.sasl_user
            kw["sasl_options"] = opts
        if self.auth:
            kw["auth_data"] = list(self.auth)
        return kw

    def who(self) -> str:
        """Who this client is to ZooKeeper, for messages (never a password)."""
        parts = []
        if self.sasl_mechanism:
            parts.append(f"SASL {self.sasl_mechanism} user {self.sasl_user!r}" if self.sasl_user
                         else f"SASL {self.sasl_mechanism}")
        parts += [f"{s} identity {c.partition(':')[0]!r}" if s == "digest" else f"{s} credentials"
                  for s, c in self.auth]
        if self.tls_cert:
            parts.append(f"the certificate {self.tls_cert}")
        return ", ".join(parts) if parts else "a client with no credentials"

    def env(self) -> Dict[str, str]:
        """Environment variables that give a child process (a demo worker) the same security."""
        out = {"ZK_TLS_CA": self.tls_ca or "", "ZK_TLS_CERT": self.tls_cert or "", "ZK_TLS_KEY": self.tls_key or "",
               "ZK_SASL_MECHANISM": self.sasl_mechanism or "", "ZK_SASL_USER": self.sasl_user or "",
               "ZK_AUTH": "\n".join(f"{s}:{c}" for s, c in self.auth), "ZK_AUTH_PASSWORD": ""}
        if self.tls_key_password:
            out["ZK_TLS_KEY_PASSWORD"] = self.tls_key_password
        if self.sasl_password:
            out["ZK_SASL_PASSWORD"] = self.sasl_password
        return out


# -- options -------------------------------------------------------------------------------------------
def add_options(parser: argparse.ArgumentParser) -> None:
    """The security options of every command that connects (``--tls-*``, ``--sasl-*``, ``--auth``)."""
    g = parser.add_argument_group("secured ensembles (passwords only from the environment)")
    g.add_argument("--tls-ca", metavar="FILE", help="CA certificate(s) to trust, PEM; turns TLS on ($ZK_TLS_CA)")
    g.add_argument("--tls-cert", metavar="FILE", help="client certificate, PEM ($ZK_TLS_CERT)")
    g.add_argument("--tls-key", metavar="FILE",
                   help="its private key, PEM ($ZK_TLS_KEY; password in $ZK_TLS_KEY_PASSWORD)")
    g.add_argument("--sasl-user", metavar="USER", help="SASL login ($ZK_SASL_USER; password in $ZK_SASL_PASSWORD)")
    g.add_argument("--sasl-mechanism", metavar="M", type=str.upper,
                   help="DIGEST-MD5 (default) or GSSAPI ($ZK_SASL_MECHANISM)")
    g.add_argument("--auth", metavar="SCHEME:CRED", action="append",
                   help="add_auth credentials, repeatable; digest:USER takes the password from $ZK_AUTH_PASSWORD "
                        "($ZK_AUTH=digest:USER:PASSWORD); with a digest identity the nodes made are writable "
                        "only by it")


def _opt(args: Any, name: str, env: Mapping[str, str], var: str) -> Optional[str]:
    value = getattr(args, name, None)
    return value if value else (env.get(var) or None)


def _file(option: str, path: Optional[str]) -> Optional[str]:
    if path is not None and not os.path.isfile(path):
        raise ConnectError(f"bad {option} {path!r}: no such file", EXIT_USAGE)
    if path is not None and not os.access(path, os.R_OK):
        raise ConnectError(f"bad {option} {path!r}: not readable", EXIT_USAGE)
    return path


def from_args(args: Any = None, env: Optional[Mapping[str, str]] = None) -> Security:
    """The Security that options (``args``, an argparse namespace; None for none) and the environment ask
    for. Checks files, passwords and the SASL library before any ZooKeeper call (ConnectError)."""
    env = os.environ if env is None else env
    ca = _file("--tls-ca/ZK_TLS_CA", _opt(args, "tls_ca", env, "ZK_TLS_CA"))
    cert = _file("--tls-cert/ZK_TLS_CERT", _opt(args, "tls_cert", env, "ZK_TLS_CERT"))
    key = _file("--tls-key/ZK_TLS_KEY", _opt(args, "tls_key", env, "ZK_TLS_KEY"))
    key_password = env.get("ZK_TLS_KEY_PASSWORD") or None
    if key and not cert:
        raise ConnectError("--tls-key/ZK_TLS_KEY given without --tls-cert/ZK_TLS_CERT", EXIT_USAGE)
    if ca or cert:
        _check_tls(ca, cert, key, key_password)

    user = _opt(args, "sasl_user", env, "ZK_SASL_USER")
    mechanism = _opt(args, "sasl_mechanism", env, "ZK_SASL_MECHANISM")
    sasl_password = None
    if mechanism is not None:
        mechanism = mechanism.upper()
        if mechanism not in MECHANISMS:
            raise ConnectError(f"bad --sasl-mechanism/ZK_SASL_MECHANISM {mechanism!r}: use one of "
                               f"{', '.join(MECHANISMS)}", EXIT_USAGE)
    elif user:
        mechanism = "DIGEST-MD5"
    if mechanism == "DIGEST-MD5":
        if not user:
            raise ConnectError("SASL DIGEST-MD5 needs a user: --sasl-user or ZK_SASL_USER", EXIT_USAGE)
        sasl_password = env.get("ZK_SASL_PASSWORD")
        if not sasl_password:
            raise ConnectError(f"SASL user {user!r} needs a password in ZK_SASL_PASSWORD (never on the command line)",
                               EXIT_USAGE)
    if mechanism is not None:
        if importlib.util.find_spec("puresasl") is None:  # kazoo's SASL library: our optional extra
            raise ConnectError("SASL needs the pure-sasl package: pip install 'zkrecipes[sasl]'", EXIT_UNAVAILABLE)

    return Security(ca, cert, key, key_password, mechanism, user, sasl_password, _auth(args, env))


def _auth(args: Any, env: Mapping[str, str]) -> Tuple[Tuple[str, str], ...]:
    given: Optional[Sequence[str]] = getattr(args, "auth", None)
    if given:
        entries, source = list(given), "--auth"
    else:
        entries, source = [e for e in (env.get("ZK_AUTH") or "").splitlines() if e.strip()], "ZK_AUTH"
    out = []
    for entry in entries:
        scheme, sep, cred = entry.strip().partition(":")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", scheme) or not cred:
            raise ConnectError(f"bad {source} {_mask(entry)!r}: expected SCHEME:CREDENTIAL, e.g. digest:USER",
                               EXIT_USAGE)
        if scheme == "digest":
            user, has_pw, password = cred.partition(":")
            if not user:
                raise ConnectError(f"bad {source} {_mask(entry)!r}: digest needs a user name", EXIT_USAGE)
            if has_pw and source == "--auth":
                raise ConnectError(f"--auth digest:{user}:...: no password on the command line (every user of "
                                   "the machine can read it); give --auth digest:USER and the password in "
                                   "ZK_AUTH_PASSWORD, or put digest:USER:PASSWORD in ZK_AUTH", EXIT_USAGE)
            if not has_pw:
                password = env.get("ZK_AUTH_PASSWORD") or ""
                if not password:
                    raise ConnectError(f"{source} digest:{user} needs its password in ZK_AUTH_PASSWORD", EXIT_USAGE)
            cred = f"{user}:{password}"
        out.append((scheme, cred))
    return tuple(out)


def _mask(entry: str) -> str:
    """An auth entry with any password part hidden."""
    parts = entry.split(":", 2)
    return ":".join(parts[:2] + ["***"]) if len(parts) == 3 else entry


def _check_tls(ca: Optional[str], cert: Optional[str], key: Optional[str], password: Optional[str]) -> None:
    """Load the TLS files as kazoo will, so a bad file or key password is told before connecting."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        if ca:
            context.load_verify_locations(ca)
    except (ssl.SSLError, OSError) as exc:
        raise ConnectError(f"bad --tls-ca/ZK_TLS_CA {ca!r}: not PEM certificates ({exc})", EXIT_USAGE) from None
    if not cert:
        return
    try:
        context.load_cert_chain(cert, key or cert, password=password or _no_password)
    except _NoPassword:
        raise ConnectError(f"the TLS key {key or cert!r} is encrypted: set ZK_TLS_KEY_PASSWORD", EXIT_USAGE) from None
    except (ssl.SSLError, OSError) as exc:
        what = "wrong ZK_TLS_KEY_PASSWORD, or " if password else ""
        raise ConnectError(f"bad TLS client certificate/key {cert!r}/{key or cert!r}: {what}not PEM, or the key "
                           f"does not match the certificate ({exc})", EXIT_USAGE) from None


class _NoPassword(Exception):
    pass


def _no_password() -> str:
    raise _NoPassword()


# -- connecting ------------------------------------------------------------------------------------------
KAZOO_LOG = "zkrecipes.cli.kazoo"


class _Reasons(logging.Handler):
    """Keeps what kazoo's connection thread says about failed attempts (its messages and exceptions) and
    passes each record on as the logging configuration asks."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: List[str] = []
        self.errors: List[BaseException] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.WARNING:
            self.messages.append(record.getMessage())
            if record.exc_info and record.exc_info[1] is not None:
                self.errors.append(record.exc_info[1])
        parent = logging.getLogger(KAZOO_LOG).parent
        if parent is not None and parent.isEnabledFor(record.levelno):
            parent.handle(record)


@contextlib.contextmanager
def _kazoo_reasons() -> Iterator[_Reasons]:
    """While connecting, see kazoo's warnings however quiet the logging configuration is."""
    kazoo_log = logging.getLogger(KAZOO_LOG)
    reasons = _Reasons()
    saved = kazoo_log.level, kazoo_log.propagate
    kazoo_log.setLevel(min(logging.WARNING, kazoo_log.getEffectiveLevel()))
    kazoo_log.propagate = False  # the handler passes records on itself
    kazoo_log.addHandler(reasons)
    try:
        yield reasons
    finally:
        kazoo_log.removeHandler(reasons)
        kazoo_log.setLevel(saved[0])
        kazoo_log.propagate = saved[1]


def new_client(hosts: str, session_timeout: float, security: Security) -> KazooClient:
    """An unstarted KazooClient for ``hosts`` with ``security``'s TLS, SASL and credentials. Its kazoo log
    goes to the ``zkrecipes.cli.kazoo`` logger, which :func:`start` reads to tell why a connection failed."""
    return KazooClient(hosts=hosts, timeout=session_timeout, logger=logging.getLogger(KAZOO_LOG),
                       **security.kazoo_kwargs())


def start(client: KazooClient, hosts: str, connect_timeout: float, security: Security) -> Any:
    """Start ``client`` and make one request, so that a session the server refuses or closes for want of
    authentication fails here, within ``connect_timeout``: ConnectError 69 (unreachable, TLS handshake
    failed) or 77 (authentication required or refused). Returns the stat of ``/`` (None: the client's
    chroot does not exist). The caller closes the client on error."""
    deadline = time.monotonic() + connect_timeout
    with _kazoo_reasons() as reasons:
        try:
            live = client.start_async()
        except Exception as exc:
            raise _refused(exc, reasons, security, hosts) from None
        # not client.start(timeout): on a time-out it stops the client itself, waiting out a handshake that a
        # silent server never answers (the session timeout); the caller's close does not wait for that
        live.wait(connect_timeout)
        if not client.connected:
            raise ConnectError(_unreachable(hosts, connect_timeout, reasons, security), EXIT_UNAVAILABLE)
        # kazoo reports CONNECTED before its SASL exchange; a request queued now runs after it
        try:
            return Driver(client, max(deadline, time.monotonic() + 0.1), never, None).run(_root())
        except DeadlinePassed:
            raise ConnectError(_unreachable(hosts, connect_timeout, reasons, security), EXIT_UNAVAILABLE) from None
        except Exception as exc:
            raise _refused(exc, reasons, security, hosts) from None


def _root() -> Steps[Any]:
    """One read of ``/`` (one attempt, its error raised): the stat, or None if the chroot does not exist."""
    return (yield Read("exists", "/", once=True))


def _refused(exc: BaseException, reasons: _Reasons, security: Security, hosts: str) -> ConnectError:
    """The error of the first request: what the connection thread failed on, if it was authentication."""
    cause = next((e for e in reversed(reasons.errors) if _auth_error(e)), exc)
    message = failure(cause, security, hosts)
    if message is None:
        return ConnectError(f"ZooKeeper at {hosts} closed the connection ({type(exc).__name__}) "
                            f"{_last(reasons)}".rstrip(), EXIT_UNAVAILABLE)
    return ConnectError(*message)


def _auth_error(exc: BaseException) -> bool:
    return isinstance(exc, (AuthFailedError, SessionClosedRequireSaslError, NoAuthError, SASLException))


def _last(reasons: _Reasons) -> str:
    drops = [m for m in reasons.messages if "Connection dropped" in m or "time-out" in m]
    return f"(last error: {drops[-1]})" if drops else ""


def _unreachable(hosts: str, timeout: float, reasons: _Reasons, security: Security) -> str:
    text = f"cannot reach ZooKeeper at {hosts} within {timeout:g} s"
    drops = [m.replace("Connection dropped: ", "").replace("socket connection error: ", "")
             for m in reasons.messages if "Connection dropped" in m]
    if not drops:
        return text
    last = drops[-1]
    if "CERTIFICATE_VERIFY_FAILED" in last:
        return f"{text}: TLS handshake failed, the server's certificate is not trusted by --tls-ca ({last})"
    if "SSL" in last or "TLS" in last:
        hint = "" if security.tls_cert else "; does the server want a client certificate (--tls-cert/--tls-key)?"
        if "EOF" in last or "WRONG_VERSION" in last:
            hint = "; is it a TLS port?"
        return f"{text}: TLS handshake failed ({last}){hint}"
    if "connection broken" in last and not security.tls:
        return f"{text}: the server closed each connection at once; is it a TLS port (--tls-ca)?"
    return f"{text} (last error: {last})"


def failure(exc: BaseException, security: Security, where: str) -> Optional[Tuple[str, int]]:
    """(message, exit code 77) for an authentication or authorization error, None for any other error.
    ``where`` names the hosts or path it happened on."""
    if isinstance(exc, (SessionClosedRequireSaslError, AuthFailedError)):
        # a refused SASL login: -124 from the server (kazoo 2.11), AUTH_FAILED once kazoo handles it (#810)
        if security.sasl_mechanism == "DIGEST-MD5":
            return (f"authentication refused: ZooKeeper at {where} rejected the SASL DIGEST-MD5 login of "
                    f"{security.sasl_user!r}: wrong user name or password (ZK_SASL_PASSWORD)", EXIT_NOPERM)
        if security.sasl_mechanism:
            return (f"authentication refused: ZooKeeper at {where} rejected the SASL {security.sasl_mechanism} "
                    "login (check the Kerberos ticket and principal)", EXIT_NOPERM)
        if isinstance(exc, SessionClosedRequireSaslError):
            return (f"authentication required: ZooKeeper at {where} requires SASL; set ZK_SASL_USER (or --sasl-user) "
                    "and ZK_SASL_PASSWORD", EXIT_NOPERM)
        return (f"authentication refused: ZooKeeper at {where} rejected the credentials ({security.who()})",
                EXIT_NOPERM)
    if isinstance(exc, SASLException):
        return f"authentication failed: SASL error on this side ({exc or type(exc).__name__})", EXIT_NOPERM
    if isinstance(exc, NoAuthError):
        return (f"not authorized: the ACL of {where} does not allow this for {security.who()}; a lock made with a "
                "digest identity can be joined or deleted only with the same --auth digest:USER and password",
                EXIT_NOPERM)
    return None

