"""FairLock: first come, first served; each waiter watches only the node just ahead of it."""

from __future__ import annotations

from . import naming
from ._lock import Lock, predecessor

__all__ = ["FairLock", "predecessor"]


class FairLock(Lock):
    """A fair (FIFO) distributed mutex on ephemeral-sequential nodes ``<host>-W-<seq>`` under ``path``.

    ``FairLock(zk, "/locks/nightly", identifier="worker-1")`` -- also ``host=``, ``acl=`` (applied to
    every node it creates, container parents included), ``retry=`` (a ``tenacity.Retrying`` for
    transient errors), ``tolerate_suspended=`` and ``protocol=`` (the node format: ``"zkrecipes"``, or
    ``"kazoo"`` / ``"curator"`` to share the path with kazoo's ``Lock`` or Curator's ``InterProcessMutex``,
    see :doc:`/migrating-kazoo` and :doc:`/curator`), and ``owner=`` (``"thread"``, the default, or
    ``"object"``: the hold belongs to the lock object and any thread may release it, see
    :doc:`/ownership`; a bad value is a ValueError before any request). A queue holding a node this
    node format cannot queue with makes ``acquire`` raise :class:`~zkrecipes.LockError` naming its
    format (our node deleted).

    Guarantees: grants follow queue order; a release wakes exactly one waiter (each watches only its
    predecessor); uncontended acquire is one round trip (create and list pipelined), release one
    delete. Threads of one process share a local gate, so at most one of them queues a node; the lock is
    reentrant per thread (with ``owner="object"``: threading.Lock's semantics, another acquire of the
    object waits its turn). Interoperates with ``ReadWriteLock(path).write()`` on the same path.

    Failure behaviour: when the connection drops the hold becomes ``"suspended"`` (``is_held`` False,
    ``check()`` raises :class:`~zkrecipes.LockLost` unless ``tolerate_suspended``); reconnecting with
    the same session and finding our node restores ``"held"``; session expiry -- or a suspension
    longer than the session timeout -- makes it ``"lost"`` (final): ``lost`` is set and listeners are
    told. ``token`` is the czxid of our node: pass it to whatever you write and reject lower tokens.
    """

    _kind = naming.WRITE  # wait-rule: predecessor (the Lock default)
