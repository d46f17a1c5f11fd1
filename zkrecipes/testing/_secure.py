"""Throwaway security material for test ensembles: a CA and certificates for mutual TLS, and a JAAS file
for SASL DIGEST-MD5.

Certificates are made with ``openssl`` (EC P-256 keys, valid for two days, names ``localhost`` and
``127.0.0.1``); the server's key store and trust store are PKCS12 files, the trust store made by the JDK's
``keytool`` (a CA certificate in a store made by openssl alone is not trusted by Java).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Dict, List, Mapping

from ._proc import ZooKeeperNotFound

STORE_PASSWORD = "zkrecipes-test"  # protects throwaway stores in a private temporary directory

# The Netty connection factory is what serves TLS; it needs these jars next to zookeeper.jar.
NETTY_JARS = ("netty-buffer", "netty-codec", "netty-common", "netty-handler", "netty-resolver",
              "netty-transport", "netty-transport-native-epoll", "netty-transport-native-unix-common")
NETTY_FACTORY = "org.apache.zookeeper.server.NettyServerCnxnFactory"


@dataclass(frozen=True)
class TlsFiles:
    """Paths of the material :func:`make_tls` wrote (PEM for clients, PKCS12 stores for the servers)."""

    ca: str
    client_cert: str
    client_key: str
    server_keystore: str
    server_truststore: str

    def client_kwargs(self) -> Dict[str, object]:
        """KazooClient keyword arguments for a client that presents the client certificate."""
        return {"use_ssl": True, "ca": self.ca, "certfile": self.client_cert, "keyfile": self.client_key,
                "verify_certs": True}

    def server_config(self, secure_port: int) -> List[str]:
        """zoo.cfg lines: mutual TLS (``ssl.clientAuth=need``) on ``secure_port``."""
        return [
            f"secureClientPort={secure_port}",
            "secureClientPortAddress=127.0.0.1",
            f"serverCnxnFactory={NETTY_FACTORY}",
            f"ssl.keyStore.location={self.server_keystore}",
            f"ssl.keyStore.password={STORE_PASSWORD}",
            "ssl.keyStore.type=PKCS12",
            f"ssl.trustStore.location={self.server_truststore}",
            f"ssl.trustStore.password={STORE_PASSWORD}",
            "ssl.trustStore.type=PKCS12",
            "ssl.clientAuth=need",
        ]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ZooKeeperNotFound(f"a TLS ensemble needs '{name}' on PATH (Debian: apt-get install -y "
                                f"{'openssl' if name == 'openssl' else 'default-jre-headless'})")
    return path


def _run(*cmd: str) -> None:
    done = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({done.returncode}): {done.stderr.strip()[-500:]}")


def _cert(openssl: str, d: str, name: str, subject: str, ext: str) -> None:
    key, csr, pem, extfile = (os.path.join(d, f"{name}.{x}") for x in ("key", "csr", "pem", "ext"))
    with open(extfile, "w") as f:
        f.write(ext + "\n")
    _run(openssl, "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", key, "-out", csr, "-subj", subject)
    _run(openssl, "x509", "-req", "-in", csr, "-CA", os.path.join(d, "ca.pem"), "-CAkey", os.path.join(d, "ca.key"),
         "-CAcreateserial", "-out", pem, "-days", "2", "-extfile", extfile)


def make_tls(d: str) -> TlsFiles:
    """Write a fresh CA, a server and a client certificate, and the server's stores into directory ``d``."""
    openssl, keytool = _tool("openssl"), _tool("keytool")
    os.makedirs(d, mode=0o700, exist_ok=True)
    ca_key, ca = os.path.join(d, "ca.key"), os.path.join(d, "ca.pem")
    _run(openssl, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", ca_key, "-out", ca, "-days", "2", "-subj", "/CN=zkrecipes throwaway test CA")
    names = "subjectAltName=DNS:localhost,IP:127.0.0.1"
    _cert(openssl, d, "server", "/CN=localhost", f"{names}\nextendedKeyUsage=serverAuth,clientAuth")
    _cert(openssl, d, "client", "/CN=zkrecipes-test-client", f"{names}\nextendedKeyUsage=clientAuth")
    keystore, truststore = os.path.join(d, "server.p12"), os.path.join(d, "trust.p12")
    _run(openssl, "pkcs12", "-export", "-in", os.path.join(d, "server.pem"), "-inkey", os.path.join(d, "server.key"),
         "-certfile", ca, "-name", "server", "-out", keystore, "-passout", f"pass:{STORE_PASSWORD}")
    _run(keytool, "-importcert", "-noprompt", "-alias", "ca", "-file", ca, "-keystore", truststore,
         "-storetype", "PKCS12", "-storepass", STORE_PASSWORD)
    return TlsFiles(ca, os.path.join(d, "client.pem"), os.path.join(d, "client.key"), keystore, truststore)


def netty_classpath(java_dir: str = "/usr/share/java") -> List[str]:
    """The Netty jars of a Debian install (``/usr/share/java``) that exist; [] elsewhere."""
    jars = [os.path.join(java_dir, f"{n}.jar") for n in NETTY_JARS]
    return [j for j in jars if os.path.exists(j)]


# -- SASL ---------------------------------------------------------------------------------------------
def _jaas_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_jaas(path: str, users: Mapping[str, str]) -> None:
    """A JAAS file whose ``Server`` section accepts ``users`` ({name: password}) over DIGEST-MD5."""
    entries = "\n".join(f"  user_{u}={_jaas_quote(p)}" for u, p in users.items())
    with open(path, "w") as f:
        f.write("Server {\n  org.apache.zookeeper.server.auth.DigestLoginModule required\n" + entries + ";\n};\n")
    os.chmod(path, 0o600)


SASL_CONFIG = [
    "authProvider.1=org.apache.zookeeper.server.auth.SASLAuthenticationProvider",
    "enforce.auth.enabled=true",  # every session must authenticate (ZooKeeper >= 3.7) ...
    "enforce.auth.schemes=sasl",  # ... with SASL, before its first request
]


def check_users(users: Mapping[str, str]) -> Dict[str, str]:
    """``users`` as a dict, or ValueError naming the bad entry (names are JAAS option names)."""
    if not isinstance(users, Mapping) or not users:
        raise ValueError(f"sasl_users must be a non-empty mapping of user name to password, got {users!r}")
    out = {}
    for u, p in users.items():
        if not isinstance(u, str) or not u.isidentifier():
            raise ValueError(f"sasl_users: bad user name {u!r} (letters, digits and _ only)")
        if not isinstance(p, str) or not p or "\n" in p:
            raise ValueError(f"sasl_users: bad password for {u!r} (a non-empty one-line str)")
        out[u] = p
    return out
