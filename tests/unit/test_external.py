"""zkrecipes.testing.external without servers: which ensemble the environment names, and bad input refused
with the bad value named, before any connection or docker call."""

from __future__ import annotations

import shutil

import pytest

from zkrecipes.testing import DockerEnsemble, ExternalEnsemble, ensemble_from_env
from zkrecipes.testing.external import parse_hosts


def test_parse_hosts_drops_the_chroot():
    assert parse_hosts("127.0.0.1:2181,zk2:2182/app") == [("127.0.0.1", 2181), ("zk2", 2182)]
    assert parse_hosts("[::1]:2181") == [("::1", 2181)]


@pytest.mark.parametrize("bad", ["", "   ", "127.0.0.1", "127.0.0.1:x", "127.0.0.1:0", ":2181", "a:1,b"])
def test_bad_connect_strings_are_refused_by_name(bad):
    with pytest.raises(ValueError, match="connect string"):
        ExternalEnsemble(bad)


def test_server_index_is_checked():
    ens = ExternalEnsemble("127.0.0.1:2181,127.0.0.1:2182")
    assert ens.size == 2 and ens.host(1) == "127.0.0.1:2182"
    for bad in (2, -1, True, "0"):
        with pytest.raises(ValueError, match=r"server index must be in 0\.\.1"):
            ens.host(bad)


def test_environment_picks_the_ensemble():
    assert ensemble_from_env({}) is None
    assert ensemble_from_env({"ZK_HOSTS": " "}) is None
    plain = ensemble_from_env({"ZK_HOSTS": "127.0.0.1:2181"})
    assert type(plain) is ExternalEnsemble and plain.hosts == "127.0.0.1:2181"
    if shutil.which("docker") is None:
        pytest.skip("no docker command on PATH")
    docker = ensemble_from_env({"ZK_HOSTS": "127.0.0.1:2181,127.0.0.1:2182", "ZK_DOCKER_CONTAINERS": "a, b"})
    assert isinstance(docker, DockerEnsemble) and docker.containers == ["a", "b"]


def test_one_container_per_server():
    with pytest.raises(ValueError, match=r"1 containers \['a'\] for the 2 servers"):
        DockerEnsemble("127.0.0.1:2181,127.0.0.1:2182", ["a"])
    with pytest.raises(ValueError, match="sequence of container names"):
        DockerEnsemble("127.0.0.1:2181", "a")
    with pytest.raises(RuntimeError, match="no 'no-such-docker-cli' command"):
        DockerEnsemble("127.0.0.1:2181", ["a"], docker="no-such-docker-cli")
