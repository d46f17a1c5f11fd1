"""docker/: the compose file is well-formed per the Compose Specification and is the ensemble users rely
on, and docker/Dockerfile's entrypoint turns the official image's variables into the server's settings.

docker/README.md tells users to run ``docker compose -f docker/docker-compose.yml up -d`` and then
``ZK_HOSTS=127.0.0.1:2181,127.0.0.1:2182,127.0.0.1:2183 make test``; ``make test-docker`` does it all.
No Docker engine runs these tests: they check the files, and run the entrypoint script on this machine
(with a stand-in ``java`` that records how it was called).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker" / "docker-compose.yml"
ENTRYPOINT = REPO / "docker" / "docker-entrypoint.sh"
DOCKERFILE = REPO / "docker" / "Dockerfile"
DOCKER_README = REPO / "docker" / "README.md"
SCHEMA_FILE = REPO / "docker" / "compose-spec.json"  # the Compose Specification's schema, vendored

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
    with open(SCHEMA_FILE, encoding="utf-8") as f:
        schema = json.load(f)
    jsonschema.Draft7Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in errors)


def test_no_obsolete_version_key(compose):
    assert "version" not in compose, "the top-level 'version' key is obsolete in the Compose Specification"


def test_three_zookeeper_services_on_a_pinned_official_image_unless_zk_image_says(compose):
    services = compose["services"]
    assert set(services) == SERVICES
    for name, service in services.items():
        image = service.get("image", "")
        m = re.fullmatch(r"\$\{ZK_IMAGE:-([^}]+)\}", image)
        assert m, f"{name}: image {image!r} is not picked by ZK_IMAGE (${{ZK_IMAGE:-zookeeper:3.9.4}})"
        assert re.fullmatch(r"(?:docker\.io/)?(?:library/)?zookeeper:3\.[89](?:\.\d+)?", m.group(1)), (
            f"{name}: default image {m.group(1)!r} is not the official zookeeper image pinned to 3.8 or 3.9"
        )


def test_no_restart_policy(compose):
    # a server the kit stops or kills (DockerEnsemble) must stay down until the kit starts it again
    for name, service in compose["services"].items():
        assert service.get("restart", "no") == "no", f"{name}: restart={service['restart']!r}"


def test_every_server_has_a_quorum_health_check(compose):
    # make test-docker waits for these before running the suite
    for name, service in compose["services"].items():
        test = (service.get("healthcheck") or {}).get("test")
        assert test and "srvr" in " ".join(test) and "leader|follower" in " ".join(test), f"{name}: {test!r}"


def test_server_settings_the_suite_needs(compose):
    """The suite's server-dependent tests run against these containers instead of skipping: short session
    timeouts are granted and empty container nodes (lock parents) are reaped within a second."""
    for name, service in compose["services"].items():
        env = environment(service)
        extra = dict(entry.split("=", 1) for entry in env.get("ZOO_CFG_EXTRA", "").split())
        assert int(extra.get("minSessionTimeout", 2 * int(env["ZOO_TICK_TIME"]))) <= 2000, name
        assert int(extra.get("maxSessionTimeout", 20 * int(env["ZOO_TICK_TIME"]))) >= 10000, name
        m = re.search(r"-Dznode\.container\.checkIntervalMs=(\d+)", env.get("JVMFLAGS", ""))
        assert m and int(m.group(1)) <= 1000, f"{name}: JVMFLAGS={env.get('JVMFLAGS')!r}"
        # a stopped peer's name must fail to resolve quickly, or the election after a kill waits on it
        assert {"timeout:1", "attempts:1"} <= set(service.get("dns_opt") or []), f"{name}: dns_opt"


# -- docker/Dockerfile and its entrypoint ----------------------------------------------------------------

OFFICIAL_VARIABLES = {
    "ZOO_MY_ID", "ZOO_SERVERS", "ZOO_TICK_TIME", "ZOO_INIT_LIMIT", "ZOO_SYNC_LIMIT", "ZOO_4LW_COMMANDS_WHITELIST",
    "ZOO_CFG_EXTRA", "ZOO_STANDALONE_ENABLED", "ZOO_ADMINSERVER_ENABLED", "ZOO_MAX_CLIENT_CNXNS", "JVMFLAGS",
}


def test_compose_sets_only_variables_the_local_image_honours(compose):
    for name, service in compose["services"].items():
        unknown = set(environment(service)) - OFFICIAL_VARIABLES
        assert not unknown, f"{name}: {sorted(unknown)} are not read by docker/docker-entrypoint.sh"


def test_dockerfile_builds_from_debian_packages_with_the_entrypoint():
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"apt-get .*install .*zookeeper", text, re.S), "Dockerfile does not install Debian's zookeeper"
    assert 'ENTRYPOINT ["/docker-entrypoint.sh"]' in text
    assert 'CMD ["zkServer.sh", "start-foreground"]' in text  # the official image's command
    assert os.access(ENTRYPOINT, os.X_OK), f"{ENTRYPOINT} is not executable"


@pytest.fixture
def run_entrypoint(tmp_path):
    """Run docker-entrypoint.sh with the given environment and a stand-in ``java`` that records its
    arguments; return (zoo.cfg lines, myid, java's arguments)."""
    if shutil.which("sh") is None:
        pytest.skip("no /bin/sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").write_text('#!/bin/sh\nfor a in "$@"; do echo "$a"; done > "$JAVA_ARGS"\n')
    (bin_dir / "java").chmod(0o755)

    def run(**env: str):
        dirs = {k: tmp_path / k.lower() for k in ("ZOO_CONF_DIR", "ZOO_DATA_DIR", "ZOO_DATA_LOG_DIR", "ZOO_LOG_DIR")}
        for d in dirs.values():
            d.mkdir(exist_ok=True)
        defaults = {  # the Dockerfile's ENV
            "ZOO_TICK_TIME": "2000", "ZOO_INIT_LIMIT": "5", "ZOO_SYNC_LIMIT": "2", "ZOO_AUTOPURGE_PURGEINTERVAL": "0",
            "ZOO_AUTOPURGE_SNAPRETAINCOUNT": "3", "ZOO_MAX_CLIENT_CNXNS": "60", "ZOO_STANDALONE_ENABLED": "true",
            "ZOO_ADMINSERVER_ENABLED": "true",
        }
        full = {"PATH": f"{bin_dir}:/usr/bin:/bin", "JAVA_ARGS": str(tmp_path / "java.args"),
                **{k: str(v) for k, v in dirs.items()}, **defaults, **env}
        subprocess.run([str(ENTRYPOINT), "zkServer.sh", "start-foreground"], env=full, check=True, timeout=30)
        cfg = (dirs["ZOO_CONF_DIR"] / "zoo.cfg").read_text().splitlines()
        myid = (dirs["ZOO_DATA_DIR"] / "myid").read_text().strip()
        return cfg, myid, (tmp_path / "java.args").read_text().splitlines()

    return run


def test_entrypoint_turns_the_compose_variables_into_zoo_cfg(compose, run_entrypoint):
    env = environment(compose["services"]["zk2"])
    cfg, myid, args = run_entrypoint(**env)
    assert myid == "2"
    for line in ("tickTime=200", "initLimit=50", "syncLimit=25", "maxClientCnxns=0", "standaloneEnabled=false",
                 "admin.enableServer=false", "4lw.commands.whitelist=*", "minSessionTimeout=400",
                 "maxSessionTimeout=60000", "forceSync=no", "server.1=zk1:2888:3888;2181",
                 "server.2=zk2:2888:3888;2181", "server.3=zk3:2888:3888;2181"):
        assert line in cfg, f"{line!r} not in zoo.cfg:\n" + "\n".join(cfg)
    for flag in env["JVMFLAGS"].split():  # the JVM gets JVMFLAGS and runs the server on that zoo.cfg
        assert flag in args, f"java was not given {flag}: {args}"
    assert args[-2] == "org.apache.zookeeper.server.quorum.QuorumPeerMain"
    assert args[-1].endswith("/zoo_conf_dir/zoo.cfg"), args


def test_entrypoint_defaults_are_the_official_images(run_entrypoint):
    cfg, myid, _ = run_entrypoint()
    assert myid == "1"
    for line in ("tickTime=2000", "initLimit=5", "syncLimit=2", "maxClientCnxns=60", "standaloneEnabled=true",
                 "admin.enableServer=true", "server.1=localhost:2888:3888;2181"):
        assert line in cfg, f"{line!r} not in zoo.cfg:\n" + "\n".join(cfg)
    assert not [ln for ln in cfg if ln.startswith("4lw.")]


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
