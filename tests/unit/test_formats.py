"""Node formats (zkrecipes, kazoo, Curator): names, parsing, order, and the refusal of foreign children."""

from __future__ import annotations

import uuid

import pytest

from zkrecipes import FairLock, LeaderElection, LockError, ReadWriteLock, formats
from zkrecipes import _engine as p
from zkrecipes._lock import predecessor
from zkrecipes.formats import CURATOR, KAZOO, ZKRECIPES, get
from zkrecipes.naming import QueueNode

KAZOO_ID = uuid.uuid4().hex  # what kazoo puts before its marker
CURATOR_ID = f"_c_{uuid.uuid4()}-"  # Curator's protected prefix


@pytest.mark.parametrize(
    "name,fmt,recipe,kind,seq,ours",
    [
        ("web-1-W-0000000007", ZKRECIPES, "queue", "W", 7, True),
        ("web-1-R--000000001", ZKRECIPES, "queue", "R", -1, True),
        (f"{KAZOO_ID}__lock__0000000003", KAZOO, "lock", "W", 3, False),
        (f"{KAZOO_ID}__rlock__-2147483648", KAZOO, "lock", "R", -2147483648, False),
        (f"{CURATOR_ID}lock-0000000004", CURATOR, "lock", "W", 4, False),
        (f"{CURATOR_ID}__READ__0000000005", CURATOR, "rw", "R", 5, False),
        (f"{CURATOR_ID}__WRIT__0000000006", CURATOR, "rw", "W", 6, False),
        (f"{CURATOR_ID}latch-0000000008", CURATOR, "election", "W", 8, False),
        (f"{CURATOR_ID}latch--000000002", CURATOR, "election", "W", -2, False),
    ],
)
def test_identify_names_the_library_and_reads_the_sequence_as_an_integer(name, fmt, recipe, kind, seq, ours):
    found = formats.identify(name)
    assert found is not None
    assert (found.format, found.recipe, found.node.kind, found.node.sequence, found.ours) == (
        fmt, recipe, kind, seq, ours)


@pytest.mark.parametrize("name", ["lock", "leader", "x-W-123", "abc__lock__123", "config-0000000001x"])
def test_names_of_no_known_format_are_not_identified(name):
    assert formats.identify(name) is None


@pytest.mark.parametrize(
    "fmt,recipe,kind,pattern",
    [
        (KAZOO, "lock", "W", r"^7a6b726563697065[0-9a-f]{16}__lock__$"),
        (KAZOO, "rw", "R", r"^7a6b726563697065[0-9a-f]{16}__rlock__$"),
        (CURATOR, "lock", "W", r"^_c_7a6b7265-6369-7065-[0-9a-f]{4}-[0-9a-f]{12}-lock-$"),
        (CURATOR, "rw", "W", r"^_c_7a6b7265-6369-7065-[0-9a-f]{4}-[0-9a-f]{12}-__WRIT__$"),
        (CURATOR, "rw", "R", r"^_c_7a6b7265-6369-7065-[0-9a-f]{4}-[0-9a-f]{12}-__READ__$"),
        (CURATOR, "election", "W", r"^_c_7a6b7265-6369-7065-[0-9a-f]{4}-[0-9a-f]{12}-latch-$"),
    ],
)
def test_foreign_formats_are_named_like_the_library_with_our_mark(fmt, recipe, kind, pattern):
    import re

    nf = get(fmt, recipe)
    guid = nf.new_guid()
    prefix = nf.prefix("host", kind, guid)
    assert re.match(pattern, prefix) and guid in prefix  # the guid finds our node after a lost create reply
    found = formats.identify(prefix + "0000000001")
    assert found is not None and found.ours and found.format == fmt
    # the mark can never be a uuid4 (version digit 4), so kazoo's and Curator's own nodes are never "ours"
    assert len(prefix.split("__")[0] if fmt == KAZOO else prefix[3:39]) in (32, 36)


def test_data_formats():
    assert get(KAZOO, "lock").data("worker-1", "g", "host") == b"worker-1"  # kazoo: the identifier
    assert get(KAZOO, "lock").data(None, "g", "host") == b""
    assert get(CURATOR, "lock").data(None, "g", "host") == b"host"  # Curator's default: the host's address
    assert get(CURATOR, "election").data("id-7", "g", "host") == b"id-7"  # LeaderLatch: the participant id
    assert b'"guid":"g"' in get(ZKRECIPES, "lock").data(None, "g", "host")


def test_each_protocol_queues_only_with_what_its_library_would_see():
    names = {
        "zk": "h-W-0000000001",
        "kazoo": f"{KAZOO_ID}__lock__0000000002",
        "kazoo-ours": "7a6b726563697065" + "0" * 16 + "__rlock__0000000003",
        "mutex": f"{CURATOR_ID}lock-0000000004",
        "rw": f"{CURATOR_ID}__WRIT__0000000005",
        "latch": f"{CURATOR_ID}latch-0000000006",
    }
    accepts = {
        (ZKRECIPES, "lock"): {"zk", "kazoo-ours"},  # zkrecipes' own, in either format: the switch-over
        (KAZOO, "lock"): {"zk", "kazoo", "kazoo-ours"},
        (CURATOR, "lock"): {"mutex"},
        (CURATOR, "rw"): {"rw"},
        (CURATOR, "election"): {"latch"},
    }
    for (name, recipe), want in accepts.items():
        nf = get(name, recipe)
        assert {k for k, n in names.items() if nf.parse(n) is not None} == want, (name, recipe)


def test_ahead_orders_by_integer_wrap_aware_sequence_and_refuses_foreign_children_behind_us_too():
    kazoo = get(KAZOO, "lock")
    listing = [f"{KAZOO_ID}__lock__-2147483648", "a__rlock__2147483646", "h-W-2147483647", "b__lock__-000000003"]
    ahead, seen = kazoo.ahead("/p", listing, -3)
    assert seen and [n.sequence for n in ahead] == [2147483646, 2147483647, -2147483648]
    assert [n.kind for n in ahead] == ["R", "W", "W"]
    # a Curator node behind us: kazoo would not see it, so neither may we
    with pytest.raises(LockError) as err:
        kazoo.ahead("/p", listing + [f"{CURATOR_ID}lock-0000000009"], -3)
    msg = str(err.value)
    assert "Curator InterProcessMutex" in msg and "protocol='curator'" in msg and "/p" in msg
    with pytest.raises(LockError, match="kazoo ReadLock .*protocol='kazoo'"):
        get(ZKRECIPES, "lock").ahead("/p", ["h-W-0000000001", f"{KAZOO_ID}__rlock__0000000002"], 1)
    with pytest.raises(LockError, match="'lease_holder' is not a lock node"):
        get(ZKRECIPES, "lock").ahead("/p", ["h-W-0000000001", "lease_holder"], 1)
    with pytest.raises(LockError, match="zkrecipes node .*same protocol="):
        get(CURATOR, "lock").ahead("/p", [f"{CURATOR_ID}lock-0000000001", "h-W-0000000002"], 1)


def test_the_default_fast_path_agrees_with_the_full_parse():
    nf = get(ZKRECIPES, "lock")
    names = [f"h-{'RW'[i % 2]}-{i:010d}" for i in range(1, 50)] + ["x-y-R--2147483648"]  # half the ring away: behind
    ahead, seen = nf.ahead("/p", names, 30)
    assert seen and [n.sequence for n in ahead] == list(range(1, 30))
    assert [n.kind for n in ahead] == ["RW"[i % 2] for i in range(1, 30)]


def test_enqueue_refuses_a_foreign_listing_and_deletes_our_node():
    sid = 0x99
    from kazoo.protocol.states import ZnodeStat

    stat = ZnodeStat(5, 5, 0, 0, 0, 0, 0, sid, 0, 0, 5)
    gen = p.acquire("/p", [], "h-W-", b"{}", "g", predecessor)
    gen.send(None)
    reply = (("/p/h-W-0000000002", stat), [f"{KAZOO_ID}__lock__0000000001", "h-W-0000000002"], sid)
    assert gen.send(reply) == p.Delete("/p/h-W-0000000002", sid)
    with pytest.raises(LockError, match="kazoo Lock"):
        gen.send(None)


def test_a_relisting_that_finds_a_foreign_node_deletes_our_node():
    from kazoo.protocol.states import ZnodeStat

    sid = 0x99
    stat = ZnodeStat(5, 5, 0, 0, 0, 0, 0, sid, 0, 0, 5)
    gen = p.acquire("/p", [], "h-W-", b"{}", "g", predecessor)
    gen.send(None)
    reply = (("/p/h-W-0000000003", stat), ["h-W-0000000001", "h-W-0000000002", "h-W-0000000003"], sid)
    assert gen.send(reply) == p.Watch("/p/h-W-0000000002", listing="/p")
    assert gen.send(stat) is p.SLEEP
    assert gen.send(frozenset({"/p/h-W-0000000002"})) == p.Read("get_children", "/p")
    assert gen.send(["h-W-0000000001", "h-W-0000000003", f"{CURATOR_ID}lock-0000000004"]) == p.Delete(
        "/p/h-W-0000000003", sid)
    with pytest.raises(LockError, match="Curator InterProcessMutex"):
        gen.send(None)


def test_protocol_is_checked_before_any_zookeeper_call():
    from kazoo.client import KazooClient

    client = KazooClient(hosts="127.0.0.1:1")
    with pytest.raises(ValueError, match="'zookeeper'"):
        FairLock(client, "/p", protocol="zookeeper")
    with pytest.raises(TypeError, match="None"):
        ReadWriteLock(client, "/p", protocol=None)  # type: ignore[arg-type]
    from zkrecipes import ExclusiveLock

    with pytest.raises(ValueError, match="ExclusiveLock supports protocol 'zkrecipes' only, got protocol='kazoo'"):
        ExclusiveLock(client, "/p", protocol="kazoo")
    assert LeaderElection(client, "/p", protocol="curator").protocol == "curator"
    client.close()


# every public recipe of both fronts, and the node formats it implements (issue 26: the others refuse)
def _recipes():
    from zkrecipes import ExclusiveLock, FairLock, LeaderElection, ReadWriteLock, Semaphore, aio

    every = set(formats.NAMES)
    return [
        ("FairLock", lambda c, p: FairLock(c, "/m", protocol=p), every),
        ("ReadWriteLock", lambda c, p: ReadWriteLock(c, "/m", protocol=p), every),
        ("LeaderElection", lambda c, p: LeaderElection(c, "/m", protocol=p), every),
        ("ExclusiveLock", lambda c, p: ExclusiveLock(c, "/m", protocol=p), {"zkrecipes"}),
        ("Semaphore", lambda c, p: Semaphore(c, "/m", 3, protocol=p), {"zkrecipes"}),
        ("aio.FairLock", lambda c, p: aio.FairLock(c, "/m", protocol=p), every),
        ("aio.ReadWriteLock", lambda c, p: aio.ReadWriteLock(c, "/m", protocol=p), every),
        ("aio.LeaderElection", lambda c, p: aio.LeaderElection(c, "/m", protocol=p), every),
        ("aio.ExclusiveLock", lambda c, p: aio.ExclusiveLock(c, "/m", protocol=p), {"zkrecipes"}),
        ("aio.Semaphore", lambda c, p: aio.Semaphore(c, "/m", 3, protocol=p), {"zkrecipes"}),
    ]


@pytest.mark.parametrize("fmt", formats.NAMES)
@pytest.mark.parametrize("name,make,supported", _recipes(), ids=[r[0] for r in _recipes()])
def test_every_recipe_and_node_format_pair_is_implemented_or_refused(name, make, supported, fmt):
    from kazoo.client import KazooClient

    client = KazooClient(hosts="127.0.0.1:1")  # never started: refused before any ZooKeeper call
    try:
        if fmt in supported:
            obj = make(client, fmt)
            assert obj.protocol == fmt
        else:
            with pytest.raises(ValueError) as info:
                make(client, fmt)
            assert "supports protocol 'zkrecipes' only" in str(info.value) and repr(fmt) in str(info.value)
    finally:
        client.close()


def test_sort_any_keeps_every_format_in_one_wrap_aware_order():
    names = ["h-W--2147483648", f"{KAZOO_ID}__lock__2147483647", f"{CURATOR_ID}lock-2147483646", "lease"]
    got = [(formats.label(f), n.sequence) for f, n in formats.sort_any(names)]
    assert got == [("curator", 2147483646), ("kazoo", 2147483647), ("zkrecipes", -2147483648)]
    assert formats.own("h-W-0000000001") == QueueNode("h-W-0000000001", "h", "W", 1)
    assert formats.own(f"{KAZOO_ID}__lock__0000000001") is None


def test_a_new_key_in_kazoo_format_gets_persistent_parents():
    from kazoo.exceptions import NoNodeError

    for name, container in ((KAZOO, False), (CURATOR, True), (ZKRECIPES, True)):
        nf = get(name, "lock")
        gen = p.acquire("/a/b", [], nf.prefix("h", "W", "g"), b"", "g", predecessor, fmt=nf)
        gen.send(None)
        assert gen.send((NoNodeError(), NoNodeError(), None)) == p.CreateParent("/a/b", [], container)
        gen.close()


def test_the_old_module_name_still_works_and_warns():
    import importlib
    import sys

    sys.modules.pop("zkrecipes.protocols", None)
    with pytest.warns(DeprecationWarning, match="zkrecipes.formats"):
        old = importlib.import_module("zkrecipes.protocols")
    assert old.Protocol is formats.NodeFormat and old.get is formats.get and old.identify is formats.identify
    found = formats.identify(f"{KAZOO_ID}__lock__0000000003")
    assert found is not None and (found.protocol, found.family) == (found.format, found.recipe) == (KAZOO, "lock")


# -- recipes of zkrecipes that share a path (issue 37): refused ahead, let be behind ------------------------
QUEUE = [("lock", "FairLock"), ("rw", "ReadWriteLock"), ("election", "LeaderElection")]


@pytest.mark.parametrize("fmt", [ZKRECIPES, KAZOO])
@pytest.mark.parametrize("recipe,title", QUEUE)
def test_a_queue_refuses_a_semaphores_lease_anywhere_ahead_naming_path_node_and_recipe(recipe, title, fmt):
    nf = get(fmt, recipe)
    # not only the node just ahead: a lease further ahead, behind a writer, is refused too
    with pytest.raises(LockError) as err:
        nf.ahead("/jobs/x", ["vm-S2-0000000001", "h-W-0000000002", "h-R-0000000003"], 3)
    msg = str(err.value)
    assert msg.startswith(f"/jobs/x: a {title} cannot share this path: child 'vm-S2-0000000001' is a node of a "
                          "Semaphore (max_leases 2).") and "Our node was deleted." in msg
    # a lease behind ours was created after it: its own listing shows ours, and it refuses itself
    ahead, seen = nf.ahead("/jobs/x", ["h-W-0000000001", "h-R-0000000002", "vm-S2-0000000003"], 2)
    assert seen and [n.name for n in ahead] == ["h-W-0000000001"]


def test_a_semaphore_refuses_queue_nodes_ahead_and_lets_those_behind_be():
    nf = get(ZKRECIPES, "semaphore")
    for name, who in (("h-W-0000000001", "a FairLock, ReadWriteLock (write side) or LeaderElection"),
                      ("h-R-0000000001", "a ReadWriteLock (read side)")):
        with pytest.raises(LockError) as err:
            nf.ahead("/s", [name, "vm-S2-0000000002", "vm-S2-0000000003"], 3)
        assert str(err.value).startswith(f"/s: a Semaphore cannot share this path: child {name!r} is a node of {who}.")
    ahead, seen = nf.ahead("/s", ["vm-S2-0000000001", "vm-S2-0000000002", "h-W-0000000003", "h-R-0000000004"], 2)
    assert seen and [(n.name, n.leases) for n in ahead] == [("vm-S2-0000000001", 2)]
    with pytest.raises(LockError, match="kazoo Lock"):  # another library's node: refused behind us too
        nf.ahead("/s", ["vm-S2-0000000001", f"{KAZOO_ID}__lock__0000000002"], 1)


@pytest.mark.parametrize("recipe", ["lock", "rw", "election", "semaphore"])
def test_the_exclusive_lock_node_is_refused_in_the_listing_pipelined_with_our_create_only(recipe):
    nf = get(ZKRECIPES, recipe)
    mine = "vm-S2-0000000004" if recipe == "semaphore" else "h-W-0000000004"
    with pytest.raises(LockError) as err:
        nf.ahead("/x", ["lock", mine], 4, fresh=True)
    msg = str(err.value)
    assert msg.startswith("/x: a") and "child 'lock' is a node of an ExclusiveLock." in msg
    assert "not a lock node" not in msg  # it is ours: named, not called unknown
    # a ``lock`` a later listing shows was created after our node (the fresh listing had none): its own
    # listing shows ours and it refuses itself; a waiter is not knocked out by it
    assert nf.ahead("/x", ["lock", mine], 4) == ([], True)


def test_an_exclusive_lock_refuses_every_recipes_node_and_lets_other_children_be():
    nf = get(ZKRECIPES, "exclusive")
    nf.alone("/x", ["lock", "config", "0000000001"])  # its own node and children that are no lock's
    for name, who in (("vm-S3-0000000000", "a Semaphore (max_leases 3)"), ("h-R-0000000001", "a ReadWriteLock"),
                      ("h-W-0000000002", "a FairLock, ReadWriteLock (write side) or LeaderElection")):
        with pytest.raises(LockError) as err:
            nf.alone("/x", ["lock", name])
        assert str(err.value).startswith(f"/x: an ExclusiveLock cannot share this path: child {name!r} is a node "
                                         f"of {who}")
    for name, what in ((f"{KAZOO_ID}__lock__0000000001", "kazoo Lock"), (f"{CURATOR_ID}latch-0000000002",
                                                                           "Curator LeaderLatch")):
        with pytest.raises(LockError, match=f"/x: refusing .*{name}.* is a {what}"):
            nf.alone("/x", ["lock", name])


def test_maker_names_the_recipe_of_every_kind_of_node():
    assert formats.maker("lock") == "an ExclusiveLock"
    assert formats.maker("h-S7-0000000001") == "a Semaphore (max_leases 7)"
    assert formats.maker("h-R-0000000001") == "a ReadWriteLock (read side)"
    assert formats.maker("h-W-0000000001") == "a FairLock, ReadWriteLock (write side) or LeaderElection"
    curator = formats.maker(f"{CURATOR_ID}__READ__0000000001")
    assert curator == "Curator InterProcessReadWriteLock (read) (curator format)"
    assert formats.maker("config") is None
