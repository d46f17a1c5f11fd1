"""Public test kit: real ZooKeeper servers and the faults that matter to lock holders.

- :class:`Ensemble` -- start, stop, kill, pause real ZooKeeper servers on loopback.
- :func:`expire_session` -- end a client's session server-side.
- :class:`Partition` -- a loopback proxy whose link can be cut and healed.
- a pytest plugin (``zkrecipes.testing.pytest_plugin``) with the fixtures ``zk_ensemble``,
  ``zk_local_ensemble``, ``zk_namespace``, ``zk`` and ``zk_factory``.

Importing this package needs neither pytest nor a running server.
"""

from .ensemble import Ensemble, ZooKeeperNotFound, find_classpath, four_letter, free_ports
from .faults import Partition, expire_session

__all__ = [
    "Ensemble",
    "Partition",
    "ZooKeeperNotFound",
    "expire_session",
    "find_classpath",
    "four_letter",
    "free_ports",
]
