"""Constructors of both fronts take explicit keywords (mypy checks them: tests/typing_check.py, run by
``make test``), and a call that does not fit names the public class called, not an internal base. The
locks take ``owner=`` (threads: "thread" or "object"; asyncio: "task" or "object"), refused by name before
any request; elections and latches have no ``owner``. MultiLock takes one list and nothing else."""

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
    ("LeaderLatch", zkrecipes.LeaderLatch, ()),
    ("aio.FairLock", aio.FairLock, ()),
    ("aio.ExclusiveLock", aio.ExclusiveLock, ()),
    ("aio.ReadLock", aio.ReadLock, ()),
    ("aio.WriteLock", aio.WriteLock, ()),
    ("aio.ReadWriteLock", aio.ReadWriteLock, ()),
    ("aio.Semaphore", aio.Semaphore, (2,)),
    ("aio.LeaderElection", aio.LeaderElection, ()),
    ("aio.LeaderLatch", aio.LeaderLatch, ()),
]
IDS = [c[0] for c in CLASSES]
# the locks (owner= is theirs); elections and latches are owned by their object
LOCKS = [c for c in CLASSES if "Leader" not in c[0]]
ELECTIONS = [c for c in CLASSES if "Leader" in c[0]]


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


@pytest.mark.parametrize("name,cls,extra", LOCKS, ids=[c[0] for c in LOCKS])
def test_locks_take_owner_as_a_keyword_and_refuse_a_bad_one_by_name(client, name, cls, extra):
    params = inspect.signature(cls).parameters
    assert params["owner"].kind is inspect.Parameter.KEYWORD_ONLY and params["owner"].default is None, name
    native = "task" if name.startswith("aio.") else "thread"
    foreign = "thread" if native == "task" else "task"
    for good in (None, native, "object"):
        cls(client, "/p", *extra, owner=good)  # never started: a request would raise
    for bad in (foreign, "Object", "", 3, True):
        with pytest.raises(ValueError) as info:
            cls(client, "/p", *extra, owner=bad)
        assert repr(bad) in str(info.value) and f"'{native}' or 'object'" in str(info.value), (name, bad)


@pytest.mark.parametrize("name,cls,extra", ELECTIONS, ids=[c[0] for c in ELECTIONS])
def test_elections_and_latches_have_no_owner(client, name, cls, extra):
    assert "owner" not in inspect.signature(cls).parameters, name
    with pytest.raises(TypeError) as info:
        cls(client, "/p", *extra, owner="object")
    assert str(info.value).startswith(f"{name}() got an unexpected keyword argument 'owner'"), info.value


@pytest.mark.parametrize("cls", [zkrecipes.MultiLock, aio.MultiLock], ids=["MultiLock", "aio.MultiLock"])
def test_multilock_takes_one_list_and_no_keyword(cls):
    params = list(inspect.signature(cls).parameters.values())
    assert [(p.name, p.kind) for p in params] == [("locks", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for call in (lambda: cls([], hots="h"), lambda: cls([], [])):
        with pytest.raises(TypeError) as info:
            call()
        msg = str(info.value)
        assert msg.startswith("MultiLock") and "MultiCore" not in msg, msg  # the public class, not the core
    with pytest.raises(TypeError, match="timeout"):
        cls([], timeout=1)  # a deadline belongs to acquire(), not the constructor
