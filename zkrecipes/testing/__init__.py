"""Public test kit: real ZooKeeper servers and the faults that matter to lock holders.

- :class:`Ensemble` -- start, stop, kill, pause real ZooKeeper servers on loopback.
- :class:`ExternalEnsemble` -- servers someone else started (``ZK_HOSTS``): mode, leader, settings;
  :class:`DockerEnsemble` -- ones in Docker containers, which it stops, kills, pauses and starts.
- :class:`EnsembleView` and :class:`ControllableEnsemble` -- the one interface of all three: what a
  test may use from an ensemble whichever kind the fixtures hand it.
- :func:`expire_session` -- end a client's session server-side.
- :class:`Partition` -- a loopback proxy whose link can be cut and healed.
- a pytest plugin (``zkrecipes.testing.pytest_plugin``) with the fixtures ``zk_ensemble``,
  ``zk_local_ensemble``, ``zk_namespace``, ``zk`` and ``zk_factory``.

Importing this package needs neither pytest nor a running server.
"""

from ._proc import ZooKeeperNotFound
from .ensemble import Ensemble, find_classpath, four_letter, free_ports, server_conf
from .external import DockerEnsemble, ExternalEnsemble, ensemble_from_env
from .faults import Partition, expire_session
from .interface import ControllableEnsemble, EnsembleView

__all__ = [
    "ControllableEnsemble",
    "DockerEnsemble",
    "Ensemble",
    "EnsembleView",
    "ExternalEnsemble",
    "Partition",
    "ZooKeeperNotFound",
    "ensemble_from_env",
    "expire_session",
    "find_classpath",
    "four_letter",
    "free_ports",
    "server_conf",
]
