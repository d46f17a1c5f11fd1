"""ExternalEnsemble and the plugin's server-setting checks, against the session's real ensemble (the local
one, or the one ZK_HOSTS names): what a test sees through four-letter words is what the servers say."""

from __future__ import annotations

import pytest

from zkrecipes.testing import ExternalEnsemble, free_ports, server_conf
from zkrecipes.testing.pytest_plugin import REAP_PROBE_SECONDS, _probe_container_reaping


def test_an_external_view_of_the_ensemble_sees_its_leader_and_settings(zk_ensemble):
    ext = ExternalEnsemble(zk_ensemble.hosts)
    assert ext.size == zk_ensemble.size
    assert [ext.host(i) for i in range(ext.size)] == [zk_ensemble.host(i) for i in range(zk_ensemble.size)]
    assert all(ext.running(i) and ext.serving(i) for i in range(ext.size))
    modes = sorted(ext.mode(i) for i in range(ext.size))
    assert modes == ["follower"] * (ext.size - 1) + ["leader"], modes
    assert ext.mode(ext.leader()) == "leader"
    host, _, port = ext.host(0).rpartition(":")
    conf = server_conf(host, int(port))
    assert conf["tickTime"] == ext.conf(0)["tickTime"] == "200"
    assert ext.session_timeout_bounds() == (int(conf["minSessionTimeout"]), int(conf["maxSessionTimeout"]))


def test_the_session_ensemble_answers_through_the_interface_as_an_external_view_does(zk_ensemble):
    # whichever ensemble the fixture hands out (local, ZK_HOSTS, Docker), its own four-letter words,
    # settings and session-timeout bounds are the servers' (EnsembleView)
    ext = ExternalEnsemble(zk_ensemble.hosts)
    for i in range(zk_ensemble.size):
        srvr = zk_ensemble.four_letter(i, "srvr")
        assert f"Mode: {zk_ensemble.mode(i)}" in srvr and zk_ensemble.mode(i) == ext.mode(i), srvr
        conf = zk_ensemble.conf(i)
        assert conf["clientPort"] and conf == ext.conf(i)
        assert zk_ensemble.session_timeout_bounds() == (int(conf["minSessionTimeout"]), int(conf["maxSessionTimeout"]))
    n = zk_ensemble.size
    with pytest.raises(ValueError, match=rf"server index must be in 0\.\.{n - 1}, got {n}"):
        zk_ensemble.four_letter(n, "srvr")


def test_a_server_that_does_not_answer_is_neither_running_nor_serving():
    ext = ExternalEnsemble(f"127.0.0.1:{free_ports(1)[0]}")
    assert not ext.running(0) and ext.mode(0) is None and ext.leader() is None and ext.conf(0) == {}
    with pytest.raises(RuntimeError, match="answers the 'conf' four-letter word"):
        ext.session_timeout_bounds()
    with pytest.raises(TimeoutError, match="did not serve within 0.3 s"):
        ext.wait_serving([0], timeout=0.3)


def test_a_session_timeout_the_servers_would_clamp_skips_the_test(zk_factory):
    with pytest.raises(pytest.skip.Exception, match=r"needs a 0.1 s session timeout; .* minSessionTimeout=400 "):
        zk_factory(timeout=0.1)
    with pytest.raises(pytest.skip.Exception, match=r"maxSessionTimeout=60000 ms \(conf\)"):
        zk_factory(timeout=61.0)
    assert zk_factory(timeout=2.0).connected  # the fault tests' 2-4 s sessions are granted


def test_the_reap_probe_sees_empty_containers_reaped_within_a_second(zk_ensemble):
    took = _probe_container_reaping(zk_ensemble.hosts)
    assert took is not None and took < min(REAP_PROBE_SECONDS, 2.0), took
