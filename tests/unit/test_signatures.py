"""Constructors of both fronts take explicit keywords (mypy checks them: tests/typing_check.py, run by
``make test``), and a call that does not fit names the public class called, not an internal base."""

from __future__ import annotations

import inspect

import pytest
from kazoo.client import KazooClient

import zkrecipes
from zkrecipes import aio

KEYWORDS = {"host", "acl", "retry", "tolerate_suspended", "protocol"}

CLASSES = [
    ("FairLock", zkrecipes.FairLock, ()),
    ("ExclusiveLock", zkrecipes.ExclusiveLock, ()),
    ("ReadLock", zkrecipes.ReadLock, ()),
    ("WriteLock", zkrecipes.WriteLock, ()),
    ("ReadWriteLock", zkrecipes.ReadWriteLock, ()),
    ("Semaphore", zkrecipes.Semaphore, (2,)),
    ("LeaderElection", zkrecipes.LeaderElection, ()),
    ("aio.FairLock", aio.FairLock, ()),
    ("aio.ExclusiveLock", aio.ExclusiveLock, ()),
    ("aio.ReadLock", aio.ReadLock, ()),
    ("aio.WriteLock", aio.WriteLock, ()),
    ("aio.ReadWriteLock", aio.ReadWriteLock, ()),
    ("aio.Semaphore", aio.Semaphore, (2,)),
    ("aio.LeaderElection", aio.LeaderElection, ()),
]
IDS = [c[0] for c in CLASSES]


@pytest.fixture
def client():
    c = KazooClient(hosts="127.0.0.1:1")  # never started: everything here fails before any ZooKeeper call
    yield c
    c.close()


@pytest.mark.parametrize("name,cls,extra", CLASSES, ids=IDS)
def test_keywords_are_explicit(name, cls, extra):
    params = inspect.signature(cls).parameters
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()), name
    assert KEYWORDS <= {p for p in params if params[p].kind is inspect.Parameter.KEYWORD_ONLY}, name


@pytest.mark.parametrize("name,cls,extra", CLASSES, ids=IDS)
def test_a_misspelt_keyword_names_the_public_class(client, name, cls, extra):
    with pytest.raises(TypeError) as info:
        cls(client, "/p", *extra, hots="h")
    msg = str(info.value)
    assert "hots" in msg and "Participant" not in msg and "AioParticipant" not in msg, msg
    assert msg.startswith(f"{name}() got an unexpected keyword argument 'hots'"), msg


@pytest.mark.parametrize("name,cls,extra", CLASSES, ids=IDS)
def test_too_many_positional_arguments_name_the_public_class(client, name, cls, extra):
    with pytest.raises(TypeError) as info:
        cls(client, "/p", *extra, "id", "one too many")
    assert str(info.value) == f"{name}() too many positional arguments"


def test_a_type_error_from_validation_is_left_as_it_is(client):
    with pytest.raises(TypeError, match="client must be a kazoo KazooClient, got 'zk'"):
        zkrecipes.FairLock("zk", "/p")
    with pytest.raises(TypeError, match="tolerate_suspended must be a bool"):
        aio.FairLock(client, "/p", tolerate_suspended="yes")
