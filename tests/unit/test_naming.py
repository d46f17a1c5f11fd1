"""Bad input is refused before any ZooKeeper call; node names parse from the right and order as integers.

"Before any ZooKeeper call" is proved with a client that was never started and records every request
it is asked to send: each bad input must raise ValueError/TypeError naming the value, and the client
must have seen no request at all.
"""

from __future__ import annotations

import math

import pytest
from kazoo.client import KazooClient
from kazoo.security import make_digest_acl

from zkrecipes import ExclusiveLock, FairLock, ReadWriteLock, formats, naming
from zkrecipes.naming import QueueNode


class NeverStarted(KazooClient):
    """A client that is never connected and records every request it is asked to send."""

    def __init__(self) -> None:
        super().__init__(hosts="127.0.0.1:1")
        self.requests: list = []

    def _call(self, request, async_object):
        self.requests.append(request)
        return super()._call(request, async_object)


@pytest.fixture
def idle_client():
    client = NeverStarted()
    yield client
    assert client.requests == [], f"a ZooKeeper request was made: {client.requests}"
    client.close()


def rw_read(client, path, **kw):
    return ReadWriteLock(client, path, **kw).read()


def rw_write(client, path, **kw):
    return ReadWriteLock(client, path, **kw).write()


RECIPES = [FairLock, ExclusiveLock, rw_read, rw_write]
RECIPE_IDS = ["fair", "exclusive", "rw-read", "rw-write"]

BAD_PATHS = [
    ("locks/x", ValueError, "locks/x"),  # relative
    ("", ValueError, "''"),  # relative (empty)
    ("/locks/x/", ValueError, "/locks/x/"),  # trailing slash
    ("/", ValueError, "'/'"),  # the root itself
    ("/locks//x", ValueError, "/locks//x"),  # empty segment
    ("/locks/./x", ValueError, "/locks/./x"),  # '.' segment
    ("/locks/../x", ValueError, "/locks/../x"),  # '..' segment
    ("/..", ValueError, "/.."),
    ("/zookeeper", ValueError, "/zookeeper"),  # the reserved subtree
    ("/zookeeper/quota/x", ValueError, "/zookeeper/quota/x"),
    ("/locks/a\x00b", ValueError, "a\\x00b"),  # control characters
    ("/locks/a\nb", ValueError, "a\\nb"),
    (b"/locks/x", TypeError, "b'/locks/x'"),  # not a str
    (None, TypeError, "None"),
    (42, TypeError, "42"),
    (["/locks/x"], TypeError, "['/locks/x']"),
]


@pytest.mark.parametrize("make", RECIPES, ids=RECIPE_IDS)
@pytest.mark.parametrize("path,exc,named", BAD_PATHS, ids=[repr(p[0]) for p in BAD_PATHS])
def test_bad_path_is_refused_naming_it(idle_client, make, path, exc, named):
    with pytest.raises(exc) as info:
        make(idle_client, path)
    assert named in str(info.value)


def test_paths_that_merely_look_odd_are_accepted(idle_client):
    for path in ("/zookeeperish", "/locks/zookeeper", "/a/.b/c..", "/a-b/c_d/e.f", "/ünïcode/lock"):
        assert FairLock(idle_client, path).path == path


BAD_LABELS = [
    ("a/b", ValueError, "a/b"),
    ("/", ValueError, "'/'"),
    ("tab\there", ValueError, "tab\\there"),
    ("nul\x00", ValueError, "nul\\x00"),
    ("del\x7f", ValueError, "del\\x7f"),
    ("new\nline", ValueError, "new\\nline"),
    ("x" * 4097, ValueError, "4097 bytes; the limit is 4096 bytes"),  # past it, node data could reach 1 MB
    ("\u00e9" * 2049, ValueError, "4098 bytes; the limit is 4096 bytes"),  # counted in UTF-8
    (b"bytes", TypeError, "b'bytes'"),
    (7, TypeError, "7"),
]


@pytest.mark.parametrize("make", RECIPES, ids=RECIPE_IDS)
@pytest.mark.parametrize("field", ["identifier", "host"])
@pytest.mark.parametrize("value,exc,named", BAD_LABELS, ids=[repr(v[0]) for v in BAD_LABELS])
def test_bad_identifier_or_host_is_refused_naming_it(idle_client, make, field, value, exc, named):
    with pytest.raises(exc) as info:
        make(idle_client, "/locks/x", **{field: value})
    assert named in str(info.value)
    assert field in str(info.value)


def test_labels_up_to_the_limit_are_accepted(idle_client):
    assert FairLock(idle_client, "/locks/x", "x" * 4096, host="h" * 4096).identifier == "x" * 4096


def test_identifier_may_be_passed_positionally_and_is_validated(idle_client):
    with pytest.raises(ValueError, match="a/b"):
        FairLock(idle_client, "/locks/x", "a/b")
    assert FairLock(idle_client, "/locks/x", "worker-1").identifier == "worker-1"


BAD_TIMEOUTS = [
    (-1, ValueError, "-1"),
    (-0.001, ValueError, "-0.001"),
    (math.nan, ValueError, "nan"),
    (-math.inf, ValueError, "-inf"),
    ("5", TypeError, "'5'"),
    (True, TypeError, "True"),
]


@pytest.mark.parametrize("make", RECIPES, ids=RECIPE_IDS)
@pytest.mark.parametrize("timeout,exc,named", BAD_TIMEOUTS, ids=[repr(t[0]) for t in BAD_TIMEOUTS])
def test_bad_timeout_is_refused_naming_it(idle_client, make, timeout, exc, named):
    lock = make(idle_client, "/locks/x")
    with pytest.raises(exc) as info:
        lock.acquire(timeout=timeout)
    assert named in str(info.value)
    with pytest.raises(exc) as info:
        with lock.hold(timeout=timeout):
            pytest.fail("a lock was entered with a bad timeout")
    assert named in str(info.value)
    assert lock.state == "idle"


@pytest.mark.parametrize("nan", [math.nan, -math.nan, float("nan")], ids=["nan", "-nan", "float('nan')"])
def test_a_nan_timeout_is_called_not_a_number(idle_client, nan):
    """NaN is neither negative nor too long: the message says what it is (issue 37, item 6)."""
    said = "timeout must be a number of seconds, got nan (not a number)"
    with pytest.raises(ValueError) as info:
        naming.validate_timeout(nan)
    assert str(info.value) == said
    lock = FairLock(idle_client, "/locks/x")
    for attempt in (lambda: lock.acquire(timeout=nan), lambda: lock.hold(timeout=nan).__enter__()):
        with pytest.raises(ValueError) as info:
            attempt()
        assert str(info.value) == said and ">=" not in str(info.value)
    assert lock.state == "idle"


@pytest.mark.parametrize("make", RECIPES, ids=RECIPE_IDS)
@pytest.mark.parametrize("listener", [None, "print", 3, object()], ids=["None", "str", "int", "object"])
def test_non_callable_listener_is_refused_naming_it(idle_client, make, listener):
    lock = make(idle_client, "/locks/x")
    with pytest.raises(TypeError) as info:
        lock.add_listener(listener)
    assert repr(listener) in str(info.value)


def test_other_bad_arguments_are_refused(idle_client):
    with pytest.raises(TypeError, match="'nope'"):
        FairLock("nope", "/locks/x")
    with pytest.raises(TypeError, match="acl"):
        FairLock(idle_client, "/locks/x", acl="world:anyone")
    with pytest.raises(TypeError, match="retry"):
        FairLock(idle_client, "/locks/x", retry=3)
    lock = FairLock(idle_client, "/locks/x", acl=[make_digest_acl("user", "pw", all=True)])
    with pytest.raises(TypeError, match="'yes'"):
        lock.acquire(blocking="yes")
    with pytest.raises(ValueError, match="non-blocking"):
        lock.acquire(blocking=False, timeout=1)
    with pytest.raises(TypeError, match="'yes'"):
        FairLock(idle_client, "/locks/x", tolerate_suspended="yes")


# -- names: parse from the right, order by the integer ------------------------------------------------
@pytest.mark.parametrize(
    "name,host,kind,seq",
    [
        ("web-01-W-0000000007", "web-01", "W", 7),
        ("a-b-c-R-0000000012", "a-b-c", "R", 12),
        ("host-R-W-0000000003", "host-R", "W", 3),  # a host label that itself ends in '-R'
        ("x-W-R-0000000003", "x-W", "R", 3),
        ("-W-0000000001", "", "W", 1),
        ("h-W-2147483647", "h", "W", 2147483647),  # the last sequence before the wrap
        ("h-W--2147483648", "h", "W", -2147483648),  # ZooKeeper's %010d past 2^31-1: negative
        ("h-W--000000001", "h", "W", -1),
        ("a-b-R--1000000000", "a-b", "R", -1000000000),
        ("abc__lock__0000000005", "", "W", 5),  # kazoo's lock nodes block like writers
        ("abc__lock__-000000005", "", "W", -5),
        ("_c_abc-lock--2147483648", "", "W", -2147483648),  # Curator's, past the wrap
    ],
)
def test_names_parse_from_the_right(name, host, kind, seq):
    assert naming.parse(name) == QueueNode(name, host, kind, seq)


@pytest.mark.parametrize(
    "name", ["lock", "host-W-", "host-W-123", "host-W-000000001x", "leader", "h-W-12345678901", "h-W-x00000001"]
)
def test_names_without_a_sequence_are_not_queue_nodes(name):
    assert naming.parse(name) is None


def test_queue_orders_by_integer_sequence_not_by_string():
    children = [
        "a-host-R-1999999999",
        "m-W-0000000002",
        "b-W-2000000000",
        "c-R-0000000010",
        "lock",  # not a queue node: dropped
        "d-R-0000000009",
    ]
    order = [n.sequence for _, n in formats.sort_any(children)]
    assert order == [2, 9, 10, 1999999999, 2000000000]
    assert sorted(children) != [n.name for _, n in formats.sort_any(children)]  # string order would be wrong


def test_queue_order_survives_the_sequence_wrap():
    # ZooKeeper's counter is a signed 32-bit int: after 2147483647 come -2147483648, -2147483647, ...
    # (kazoo #606/#730: sorting those first re-elected forever). Nodes made after the wrap are behind.
    children = ["h-W--2147483647", "h-R-2147483646", "k__lock__-2147483648", "h-W-2147483647", "h-R--2147483640"]
    order = [n.name for _, n in formats.sort_any(children)]
    assert order == ["h-R-2147483646", "h-W-2147483647", "k__lock__-2147483648", "h-W--2147483647", "h-R--2147483640"]
    assert naming.distance(-2147483648, 2147483647) == 1
    assert naming.distance(2147483647, -2147483648) == -1
    assert naming.distance(0, -1) == 1 and naming.distance(-1, 0) == -1  # the second crossing, at zero
    assert naming.distance(7, 3) == 4
    # any member of the queue works as the reference: the order does not depend on the listing's order
    for rotated in (children[i:] + children[:i] for i in range(len(children))):
        assert [n.name for _, n in formats.sort_any(rotated)] == order


def test_sequence_reads_every_suffix_format_zookeeper_writes():
    assert naming.sequence("host-W-0000000042") == 42
    assert naming.sequence("host-W--000000042") == -42
    assert naming.sequence("host-W--2147483648") == -2147483648
    assert naming.sequence("uuid__rlock__-000000003") == -3
    assert naming.sequence("uuid__rlock__0000000003") == 3
    assert naming.sequence("lock") is None
    assert naming.sequence("h-W-12345678901") is None  # not ZooKeeper's format (11 digits)


def test_node_data_round_trips_and_names_the_contender():
    data = naming.node_data("worker-1", "guid-1", "web-01")
    d = naming.read_data(data)
    assert d["id"] == "worker-1" and d["guid"] == "guid-1" and d["host"] == "web-01" and isinstance(d["pid"], int)
    c = naming.contender(naming.parse("web-01-W-0000000004"), data)
    assert (c.host, c.kind, c.sequence, c.identifier, c.pid) == ("web-01", "W", 4, "worker-1", d["pid"])
    junk = naming.contender(naming.parse("x-R-0000000001"), b"\xff not json")
    assert (junk.host, junk.kind, junk.identifier, junk.pid) == ("x", "R", None, None)


def test_default_host_is_a_valid_label():
    assert naming.validate_label("host", naming.default_host()) == naming.default_host()


@pytest.mark.parametrize(
    "name, host, leases, seq",
    [
        ("web-1-S3-0000000012", "web-1", 3, 12),
        ("x-W-S10-0000000001", "x-W", 10, 1),  # a host label ending like a kind
        ("h-S2--000000001", "h", 2, -1),  # past the 32-bit wrap
    ],
)
def test_lease_names_carry_max_leases(name, host, leases, seq):
    assert naming.parse(name) == QueueNode(name, host, naming.LEASE, seq, leases)
    assert naming.sequence(name) == seq
    assert naming.lease_prefix(host, leases) + name[len(naming.lease_prefix(host, leases)):] == name


@pytest.mark.parametrize("bad", ["h-S0-0000000001", "h-S-0000000001", "h-S03-0000000001"])
def test_malformed_lease_names_parse_as_foreign_writers(bad):
    assert naming.parse(bad).kind == naming.WRITE


@pytest.mark.parametrize("bad, error", [(0, ValueError), (True, TypeError), (1.5, TypeError), (2_000_000, ValueError)])
def test_validate_max_leases(bad, error):
    with pytest.raises(error, match="max_leases"):
        naming.validate_max_leases(bad)


def test_a_lock_path_past_the_limit_is_refused_naming_it():
    from zkrecipes.naming import MAX_PATH_BYTES, validate_path

    ok = "/" + "a" * (MAX_PATH_BYTES - 1)
    assert validate_path(ok) == ok
    with pytest.raises(ValueError, match=f"lock path is {MAX_PATH_BYTES + 1} bytes; the limit is {MAX_PATH_BYTES}"):
        validate_path(ok + "b")
