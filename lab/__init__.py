"""The safety lab (``make safety``): Jepsen-style evidence that two holders never both act.

Not part of the installed package: :mod:`lab.run` (the nemesis and the trials), :mod:`lab.worker` (one
worker process), :mod:`lab.fenced` (the fenced register), :mod:`lab.check` (the checker) and
:mod:`lab.redis_server` (the Redis baseline's server, shared with bench/); trials with modules of their own:
:mod:`lab.cli_trial`, :mod:`lab.semaphore_trial`, :mod:`lab.txn_trial` and :mod:`lab.aio_trial`.
"""
