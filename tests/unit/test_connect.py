"""zkrecipes._connect without a server: settings from options and the environment, kazoo's keyword
arguments, the ACL of a digest identity, and what a demo worker inherits."""

from __future__ import annotations

import argparse

import pytest
from kazoo.security import Permissions

from zkrecipes import _connect
from zkrecipes._connect import ConnectError, Security, from_args


def parse(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    _connect.add_options(p)
    return p.parse_args(list(argv))


def test_nothing_asked_is_an_open_ensemble():
    sec = from_args(parse(), env={})
    assert sec == Security()
    assert sec.kazoo_kwargs() == {} and sec.acl() is None and sec.who() == "a client with no credentials"


def test_options_win_over_the_environment_and_passwords_come_only_from_it():
    env = {"ZK_SASL_USER": "env-user", "ZK_SASL_PASSWORD": "pw", "ZK_AUTH": "digest:team:t-pw\nip:1.2.3.4"}
    sec = from_args(parse("--sasl-user", "bob"), env=env)
    assert (sec.sasl_mechanism, sec.sasl_user, sec.sasl_password) == ("DIGEST-MD5", "bob", "pw")
    assert sec.auth == (("digest", "team:t-pw"), ("ip", "1.2.3.4"))
    kw = sec.kazoo_kwargs()
    assert kw["sasl_options"] == {"mechanism": "DIGEST-MD5", "username": "bob", "password": "pw"}
    assert kw["auth_data"] == [("digest", "team:t-pw"), ("ip", "1.2.3.4")]
    assert "pw" not in repr(sec)  # passwords never shown


def test_auth_option_takes_the_digest_password_from_the_environment():
    sec = from_args(parse("--auth", "digest:team", "--auth", "x509:anything"),
                    env={"ZK_AUTH_PASSWORD": "s3cret", "ZK_AUTH": "digest:ignored:x"})
    assert sec.auth == (("digest", "team:s3cret"), ("x509", "anything"))
    assert sec.digest_identity() == ("team", "s3cret")


def test_digest_identity_acl_lets_everyone_read_and_only_it_do_the_rest():
    acl = Security(auth=(("digest", "team:s3cret"),)).acl()
    assert acl is not None
    by_scheme = {a.id.scheme: a for a in acl}
    assert set(by_scheme) == {"world", "digest"}
    assert by_scheme["world"].perms == Permissions.READ and by_scheme["world"].id.id == "anyone"
    assert by_scheme["digest"].perms == Permissions.ALL and by_scheme["digest"].id.id.startswith("team:")


def test_gssapi_passes_through_with_the_user_as_principal():
    assert from_args(parse("--sasl-mechanism", "gssapi"), env={}).kazoo_kwargs() == {
        "sasl_options": {"mechanism": "GSSAPI"}}
    sec = from_args(parse("--sasl-mechanism", "GSSAPI", "--sasl-user", "svc@EXAMPLE.COM"), env={})
    assert sec.kazoo_kwargs()["sasl_options"] == {"mechanism": "GSSAPI", "principal": "svc@EXAMPLE.COM"}


def test_a_worker_environment_gives_the_same_settings():
    sec = Security(sasl_mechanism="DIGEST-MD5", sasl_user="bob", sasl_password="pw",
                   auth=(("digest", "team:t:pw"), ("ip", "1.2.3.4")))
    assert from_args(None, env=sec.env()) == sec
    assert from_args(None, env=Security().env()) == Security()  # and clears what the parent had


def test_missing_sasl_library_is_told(monkeypatch):
    monkeypatch.setattr(_connect.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConnectError, match=r"pip install 'zkrecipes\[sasl\]'") as err:
        from_args(parse("--sasl-user", "bob"), env={"ZK_SASL_PASSWORD": "pw"})
    assert err.value.code == 69
