"""The safety lab (``make safety``): Jepsen-style evidence that two holders never both act.

Not part of the installed package: :mod:`lab.run` (the command: trials on one shared
ensemble), :mod:`lab.catalog` (trials, faults, claims, settings), :mod:`lab.trial` (one trial: workers and
the nemesis), :mod:`lab.results` (the verdict and its reports), :mod:`lab.worker` and
:mod:`lab.worker_base` (one worker process), :mod:`lab.fenced` (the fenced register), :mod:`lab.check` (the checker) and
:mod:`lab.redis_server` (the Redis baseline's server, shared with bench/); trials with modules of their own:
:mod:`lab.cli_trial`, :mod:`lab.semaphore_trial`, :mod:`lab.txn_trial`, :mod:`lab.aio_trial`,
:mod:`lab.handover_trial`, :mod:`lab.multilock_trial`, :mod:`lab.revoke_trial` and :mod:`lab.mixed_trial`
(with :mod:`lab.mixed_worker`).
"""
