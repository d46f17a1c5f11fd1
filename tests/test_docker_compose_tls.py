"""docker/docker-compose.tls.yml: valid per the Compose Specification, and its TLS settings really work.

No Docker engine runs here: the file is checked against the schema, and its zoo.cfg lines
(``ZOO_CFG_EXTRA``) are given, with certificates from docker/make-tls-certs.sh, to a local ZooKeeper
server that a client must then reach over mutual TLS.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml
from kazoo.client import KazooClient
from kazoo.handlers.threading import KazooTimeoutError

from zkrecipes.testing import Ensemble, ZooKeeperNotFound, find_classpath, free_ports

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker" / "docker-compose.tls.yml"
CERT_SCRIPT = REPO / "docker" / "make-tls-certs.sh"
SCHEMA_FILE = REPO / "docker" / "compose-spec.json"  # the Compose Specification's schema, vendored
TLS_PORT = 2281


@pytest.fixture(scope="module")
def compose() -> dict:
    with open(COMPOSE_FILE, encoding="utf-8") as f:
        return yaml.safe_load(f)


def cfg_extra(service: dict) -> dict[str, str]:
    """The zoo.cfg lines of ZOO_CFG_EXTRA (space-separated key=value) as a dict."""
    return dict(item.split("=", 1) for item in service["environment"]["ZOO_CFG_EXTRA"].split())


def test_validates_against_compose_spec(compose):
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors)


def test_only_the_tls_ports_are_published_on_loopback(compose):
    services = compose["services"]
    assert set(services) == {"zk1", "zk2", "zk3"}
    published = []
    for name, service in services.items():
        assert [str(p) for p in service["ports"]] == [f"127.0.0.1:{2280 + int(name[-1])}:{TLS_PORT}"], name
        published.append(2280 + int(name[-1]))
    hosts = ",".join(f"127.0.0.1:{p}" for p in sorted(published))
    assert f"ZK_HOSTS={hosts}" in COMPOSE_FILE.read_text(encoding="utf-8")  # the usage in its header


def test_every_server_requires_mutual_tls_with_the_mounted_stores(compose):
    extras = [cfg_extra(s) for s in compose["services"].values()]
    assert all(e == extras[0] for e in extras), "the TLS settings must be the same on every server"
    cfg = extras[0]
    assert cfg["secureClientPort"] == str(TLS_PORT)
    assert cfg["serverCnxnFactory"] == "org.apache.zookeeper.server.NettyServerCnxnFactory"
    assert cfg["ssl.clientAuth"] == "need"
    for store in ("keyStore", "trustStore"):
        assert cfg[f"ssl.{store}.location"].startswith("/tls/"), store
        assert cfg[f"ssl.{store}.password"] == "changeit", "make-tls-certs.sh makes its stores with 'changeit'"
    for service in compose["services"].values():
        assert {"type": "bind", "source": "./tls", "target": "/tls", "read_only": True} in service["volumes"]


def test_the_settings_serve_mutual_tls_on_a_real_server(compose, tmp_path):
    """The compose file's zoo.cfg lines and make-tls-certs.sh's files, on a local server: a client with the
    client certificate gets in, one without is refused in the handshake."""
    try:
        classpath = find_classpath()
    except ZooKeeperNotFound as exc:
        pytest.skip(f"needs a local ZooKeeper install: {exc}")
    tls = tmp_path / "tls"
    subprocess.run(["bash", str(CERT_SCRIPT), str(tls)], check=True, capture_output=True, timeout=120)
    for made in ("ca.pem", "client.pem", "client.key", "server.p12", "trust.p12"):
        assert (tls / made).is_file(), made
    netty = sorted(str(p) for p in Path("/usr/share/java").glob("netty-*[a-z].jar")) if "netty" not in classpath else []
    secure_port = free_ports(1)[0]
    ens = Ensemble(size=1, classpath=os.pathsep.join([classpath, *netty]))
    try:
        cfg = cfg_extra(next(iter(compose["services"].values())))
        cfg["secureClientPort"] = str(secure_port)
        lines = [f"{k}={re.sub('^/tls/', str(tls) + '/', v)}" for k, v in cfg.items()]
        with open(os.path.join(ens.workdir, "server1", "zoo.cfg"), "a") as f:
            f.write("\n".join(lines + ["secureClientPortAddress=127.0.0.1"]) + "\n")
        ens.start()
        hosts = f"127.0.0.1:{secure_port}"
        client = KazooClient(hosts=hosts, use_ssl=True, ca=str(tls / "ca.pem"), certfile=str(tls / "client.pem"),
                             keyfile=str(tls / "client.key"))
        client.start(timeout=30)
        try:
            client.create("/over-tls", b"ok")
            assert client.get("/over-tls")[0] == b"ok"
        finally:
            client.stop()
            client.close()
        anonymous = KazooClient(hosts=hosts, use_ssl=True, ca=str(tls / "ca.pem"))
        with pytest.raises(KazooTimeoutError):
            anonymous.start(timeout=1.5)  # refused in every handshake until the timeout
    finally:
        ens.close()
