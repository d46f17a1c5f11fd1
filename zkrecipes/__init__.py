"""zkrecipes: ZooKeeper lock recipes that tell their holders when a hold is in doubt.

Exclusive, fair and read/write locks and leader election on one queue engine, with session-loss
notification and fencing tokens. See https://zkrecipes.readthedocs.io (docs/ in the source tree).
"""

__version__ = "0.1.0"
