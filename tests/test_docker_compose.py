"""docker/docker-compose.yml: well-formed per the Compose Specification, and the ensemble users rely on.

docker/README.md tells users to run ``docker compose -f docker/docker-compose.yml up -d`` and then
``ZK_HOSTS=127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183 make test``. No Docker engine runs these tests;
they check the file itself.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker" / "docker-compose.yml"
DOCKER_README = REPO / "docker" / "README.md"
SCHEMA_FILE = Path(__file__).resolve().parents[2] / "shared" / "schemas" / "compose-spec.json"

CLIENT_PORT = 2181
SERVICES = {"zk1", "zk2", "zk3"}


@pytest.fixture(scope="module")
def compose() -> dict:
    with open(COMPOSE_FILE, encoding="utf-8") as f:
        return yaml.safe_load(f)


def environment(service: dict) -> dict[str, str]:
    """A service's environment as a dict of strings (compose allows a mapping or a KEY=VALUE list)."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def published_ports(service: dict) -> list[tuple[str, int, int]]:
    """(host_ip, published, target) for each published port, from the short or the long syntax."""
    out = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            out.append((str(entry.get("host_ip", "")), int(entry["published"]), int(entry["target"])))
            continue
        text = str(entry).split("/", 1)[0]
        parts = text.split(":")
        if len(parts) == 3:
            host_ip, published, target = parts
        elif len(parts) == 2:
            host_ip, (published, target) = "", parts
        else:
            host_ip, published, target = "", "", parts[0]
        out.append((host_ip, int(published) if published else 0, int(target)))
    return out


def zoo_servers(value: str) -> dict[int, tuple[str, str]]:
    """Parse ZOO_SERVERS ``server.N=host:2888:3888;2181 ...`` into {N: (host, client part)}."""
    servers = {}
    for entry in value.split():
        m = re.fullmatch(r"server\.(\d+)=([^:;]+):(\d+):(\d+)(?::\w+)?(?:;(.*))?", entry)
        assert m, f"malformed ZOO_SERVERS entry {entry!r}"
        sid = int(m.group(1))
        assert sid not in servers, f"server.{sid} listed twice in {value!r}"
        servers[sid] = (m.group(2), m.group(5) or "")
    return servers


def test_validates_against_compose_spec(compose):
    if not SCHEMA_FILE.is_file():
        pytest.skip(f"Compose Specification schema not found at {SCHEMA_FILE}")
    with open(SCHEMA_FILE, encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors)


def test_no_obsolete_version_key(compose):
    assert "version" not in compose, "the top-level 'version' key is obsolete in the Compose Specification"


def test_three_zookeeper_services_on_a_pinned_official_image(compose):
    services = compose["services"]
    assert set(services) == SERVICES
    for name, service in services.items():
        image = service.get("image", "")
        assert re.fullmatch(r"(?:docker\.io/)?(?:library/)?zookeeper:3\.[89](?:\.\d+)?", image), (
            f"{name}: image {image!r} is not the official zookeeper image pinned to 3.8 or 3.9"
        )


def test_each_publishes_a_distinct_client_port_on_loopback(compose):
    published = {}
    for name, service in compose["services"].items():
        ports = published_ports(service)
        assert len(ports) == 1, f"{name}: expected one published port, got {service.get('ports')!r}"
        host_ip, port, target = ports[0]
        bound = host_ip or "all interfaces"
        assert host_ip == "127.0.0.1", f"{name}: port {port} must be bound to 127.0.0.1, not {bound}"
        assert target == CLIENT_PORT, f"{name}: publishes container port {target}, not the client port {CLIENT_PORT}"
        published[name] = port
    assert sorted(published.values()) == [2181, 2182, 2183], published


def test_zk_hosts_in_readme_matches_published_ports(compose):
    ports = sorted(published_ports(s)[0][1] for s in compose["services"].values())
    zk_hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
    assert f"ZK_HOSTS={zk_hosts}" in DOCKER_README.read_text(encoding="utf-8")


def test_server_ids_are_1_to_3_and_distinct(compose):
    ids = {name: environment(s).get("ZOO_MY_ID") for name, s in compose["services"].items()}
    assert sorted(ids.values()) == ["1", "2", "3"], ids


def test_every_server_lists_the_whole_ensemble(compose):
    services = compose["services"]
    ids = {int(environment(s)["ZOO_MY_ID"]): name for name, s in services.items()}
    lists = {}
    for name, service in services.items():
        value = environment(service).get("ZOO_SERVERS", "")
        servers = zoo_servers(value)
        assert set(servers) == {1, 2, 3}, f"{name}: ZOO_SERVERS lists {sorted(servers)}, not 1..3"
        for sid, (host, client) in servers.items():
            # server.N must name the service whose ZOO_MY_ID is N (its hostname on the compose network)
            assert host == ids[sid], f"{name}: server.{sid} is {host!r}, but ZOO_MY_ID={sid} is {ids[sid]!r}"
            assert client.rsplit(":", 1)[-1] == str(CLIENT_PORT), f"{name}: server.{sid} client port is {client!r}"
        lists[name] = servers
    assert all(v == lists["zk1"] for v in lists.values()), "ZOO_SERVERS must be the same on every server"


def test_four_letter_words_allowed(compose):
    # zkrecipes.testing uses 'srvr' to tell leader from follower; other words help when debugging.
    for name, service in compose["services"].items():
        assert environment(service).get("ZOO_4LW_COMMANDS_WHITELIST") == "*", name
