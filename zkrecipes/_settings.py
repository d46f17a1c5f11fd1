"""The constructor arguments every lock and election takes, validated once, before any ZooKeeper call."""

from __future__ import annotations

from typing import TYPE_CHECKING, List, Optional

import tenacity
from kazoo.client import KazooClient
from kazoo.security import ACL, OPEN_ACL_UNSAFE

from . import formats, naming
from . import retry as _retry  # the keyword argument is called retry
from ._signature import DEFAULTS, NamedInit, Options

if TYPE_CHECKING:
    from ._signature import Unpack


class Settings(NamedInit):
    """``client``, ``path``, ``identifier`` and the keywords of :data:`~zkrecipes._signature.Options`,
    checked and kept: a bad one raises TypeError or ValueError naming it, and nothing is sent. The node
    format (``protocol``) is looked up for the recipe's ``_recipe``."""

    _recipe = "lock"  # what its node format is for (:data:`zkrecipes.formats.RECIPES`)

    def __init__(
        self,
        client: KazooClient,
        path: str,
        identifier: Optional[str] = None,
        **options: Unpack[Options],
    ) -> None:
        o = {**DEFAULTS, **options}
        host, acl, retry = o["host"], o["acl"], o["retry"]
        tolerate_suspended, protocol = o["tolerate_suspended"], o["protocol"]
        if not isinstance(client, KazooClient):
            raise TypeError(f"client must be a kazoo KazooClient, got {client!r}")
        self.path = naming.validate_path(path)
        self.identifier = None if identifier is None else naming.validate_label("identifier", identifier)
        self.host = naming.default_host() if host is None else naming.validate_label("host", host)
        if acl is not None and (not isinstance(acl, (list, tuple)) or not all(isinstance(a, ACL) for a in acl)):
            raise TypeError(f"acl must be a list of kazoo.security.ACL, got {acl!r}")
        if not isinstance(tolerate_suspended, bool):
            raise TypeError(f"tolerate_suspended must be a bool, got {tolerate_suspended!r}")
        self._format = formats.get(protocol, self._recipe)  # the node format: names, data, who we queue with
        self.protocol = self._format.name
        self.client = client
        self.acl: Optional[List[ACL]] = list(acl) if acl else None
        self._acl: List[ACL] = list(acl) if acl else list(OPEN_ACL_UNSAFE)  # applied to every node we make
        self.retry: Optional[tenacity.Retrying] = _retry.validate_policy(retry)
        self.tolerate_suspended = tolerate_suspended
        self._begin()

    def _begin(self) -> None:
        """What the class adds to a new object, once its arguments are valid (before any ZooKeeper call)."""


class LockArgs:
    """The constructor every lock takes, written once: :class:`Settings`' arguments and ``owner``
    (``"object"``: the lock object owns its holds). A class mixing it in builds itself in :meth:`_build`
    (a lock: :class:`~zkrecipes._lock.LockCore`; a read/write pair: both its sides)."""

    def __init__(
        self,
        client: KazooClient,
        path: str,
        identifier: Optional[str] = None,
        *,
        owner: Optional[str] = None,
        **options: Unpack[Options],
    ) -> None:
        self._build(client, path, identifier, owner, options)

    def _build(
        self, client: KazooClient, path: str, identifier: Optional[str], owner: Optional[str], options: Options
    ) -> None:
        raise NotImplementedError
