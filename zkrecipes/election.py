"""LeaderElection: candidates queue on the same engine as FairLock; the head of the queue leads.

Each candidate watches only its predecessor, so a change of leader wakes one process, not all of them.
Before it reports leadership a candidate reads its node back and checks that it still belongs to its
current session (a node of an expired session is never mistaken for ours; cf. CURATOR-696).

The pattern for a leader's side effects: call :meth:`LeaderElection.check` before each one (it raises
:class:`~zkrecipes.LockLost` once leadership is lost or uncertain) and pass :attr:`LeaderElection.token`
to the system you write to, which rejects tokens lower than the highest it has seen.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Dict, Generator, List, Literal, Optional, Tuple, TypeVar

from kazoo.exceptions import SessionExpiredError

from . import _engine, naming, retry
from ._engine import Cancelled, DeadlinePassed, Delete, Entry, Steps
from ._gate import release_hold
from ._listing import Listed
from ._lock import Listener, Participant, Threaded, predecessor
from ._queue_watch import watch_queue
from .errors import LockCancelled, LockError, LockLost
from .naming import Contender
from .session import HELD, LOST, Hold

log = logging.getLogger("zkrecipes.election")

ElectionState = Literal["idle", "candidate", "leader", "suspended", "lost"]
IDLE: ElectionState = "idle"
CANDIDATE: ElectionState = "candidate"
LEADER: ElectionState = "leader"
R = TypeVar("R")
LEAD = object()  # what the term loop yields where the front runs the leader's function (ElectionCore._term_steps)


class ElectionCore(Participant):
    """An election's life as engine steps, for both fronts: campaign, step down, check; the public
    properties read the current term's hold."""

    _recipe = "election"
    _title = "LeaderElection"
    _metric = "election"

    def _setup(self) -> None:
        self._lock = threading.Lock()  # guards _hold and _campaigning
        self._hold: Optional[Hold] = None  # the current term's
        self._campaigning = False
        self._notify = threading.RLock()  # one state change told at a time, in order
        self._enders: List[Callable[[], None]] = []  # told once when the current term ends (run, latches)

    def _steps(self) -> Steps[Entry]:
        """A candidate's queue: the predecessor rule, our node read back before we lead."""
        prefix, data, guid = self._format.node(self.host, naming.WRITE, self.identifier)
        return _engine.acquire(
            self.path, self._acl, prefix, data, guid, predecessor, confirm=True, fmt=self._format,
            on_ahead=self._ahead_hook(),
        )

    def _campaign(self, fresh: bool) -> Steps[bool]:
        """Queue and wait until leader: True (at once if leader already). False on the deadline or a
        cancel -- also one that comes as ZooKeeper grants leadership: our node is then deleted. ``fresh``:
        forget an earlier cancel(); run() passes False when it campaigns again after a term, so a
        cancel() that came after it last looked is not lost."""
        return self._timed(self._campaign_steps(fresh))

    def _campaign_steps(self, fresh: bool) -> Steps[bool]:
        with self._lock:
            if self._hold is not None and self._hold.state != LOST:
                return True
            if self._campaigning:
                raise LockError(f"{self.path}: another {self._owner_word} is already campaigning with this election")
            self._campaigning = True
            old, self._hold = self._hold, None
            if fresh:
                self._cancelled = False
        hold = None
        try:
            if old is not None:
                yield from release_hold(old)
            if self.lost.is_set():
                self.lost.clear()
            self._set_state(CANDIDATE)
            entry = None
            try:
                entry = yield from self._steps()
            except (DeadlinePassed, Cancelled):
                pass
            if entry is not None:
                with self._lock:
                    if not self._cancelled:
                        hold = self._hold = self._make_hold(entry)
                if hold is None:  # cancel()/resign() came as we were granted: they win
                    yield Delete(entry.path, entry.session)
        finally:
            with self._lock:
                self._campaigning = False
            if hold is None:
                self._set_state(IDLE)
        if hold is None:
            return False
        hold.add_listener(self._told)
        if self._listeners:  # someone to tell: follow our node, so a break (its deletion) is a lost term at once
            hold.follow_node()
        log.info("%s: leader as %s (token %d)", self.path, hold.node, hold.token)
        self._report(hold, hold.state)
        return True

    def _step_down(self) -> Steps[None]:
        """End the current term: delete its node; a session found gone meanwhile is still told as lost."""
        with self._lock:
            hold, self._hold = self._hold, None
        if hold is None:
            return
        self._end_term()  # (before the delete: the leader's work stops first)
        yield from release_hold(hold)
        if hold.state == LOST and not self.lost.is_set():  # learned only while resigning: still told
            self.lost.set()
            self._set_state(LOST)
        self._set_state(IDLE)

    def _check(self) -> Steps[None]:
        yield from self._certain(self._fence_hold(), "leadership")

    def add_listener(self, fn: Listener) -> None:
        super().add_listener(fn)
        hold = self._hold
        if hold is not None:
            hold.follow_node()

    add_listener.__doc__ = (Participant.add_listener.__doc__ or "") + (
        " A leader with a listener follows its node (one read and a data watch per term): a node deleted by "
        "someone else (:func:`zkrecipes.break_lock`, zkCli) ends the term as lost at once.")

    def _term_steps(self, requeue: bool, fresh: bool) -> Generator[Any, Any, Any]:
        """run()'s terms, for both fronts: campaign, lead, step down; with ``requeue`` again until cancel()
        or resign(). Yields the steps of a campaign or a step-down for the front to run (``_run``), and
        :data:`LEAD` where the front runs the leader's function until the term ends: its result is sent
        in, its exception thrown in -- LockLost if the term was lost meanwhile (see :meth:`_lost_term`).
        A lost term raises LockLost, or with ``requeue`` campaigns again; the run returns the function's
        result (None once cancelled). ``fresh=False``: a cancel() that came before is not forgotten (a latch)."""
        while True:
            if not (yield self._campaign(fresh)):
                return None
            fresh = False
            try:
                result = yield LEAD
            except LockLost:
                if not requeue:
                    raise
                log.info("%s: leadership lost; campaigning again", self.path)
            else:
                if not requeue:
                    return result
            finally:
                yield self._step_down()
            if self._is_cancelled():
                return None

    def _terms_of(self, requeue: bool, fresh: bool) -> "Terms":
        """run()'s term loop for a front to drive (see :class:`Terms`)."""
        return Terms(self._term_steps(requeue, fresh))

    def _lost_term(self, what: str) -> LockLost:
        """The error of a term lost while the leader ran; ``what`` says what became of the leader."""
        return LockLost(f"{self.path}: leadership lost; {what}")

    def _on_term_end(self, fn: Callable[[], None]) -> Callable[[], None]:
        """Call ``fn()`` once when the current term ends -- lost, or stepped down (by anyone) -- at once
        if there is no live term; returns a function that forgets ``fn``. ``fn`` runs where the end is
        noticed (threads: the session thread or the resigning thread; asyncio: the event loop)."""
        with self._lock:
            hold = self._hold
            live = hold is not None and hold.state != LOST
            if live:
                self._enders.append(fn)
        if not live:
            fn()

        def forget() -> None:
            with self._lock:
                if fn in self._enders:
                    self._enders.remove(fn)

        return forget

    def _end_term(self) -> None:
        with self._lock:
            enders, self._enders = self._enders, []
        for fn in enders:
            fn()

    def _fence_hold(self) -> Hold:
        hold = self._hold
        if hold is None:
            raise LockLost(f"{self.path}: not the leader")
        return hold

    def _report(self, hold: Hold, state: str) -> None:
        # Report the hold's state as it is now, not as it was when this call was scheduled: the campaign
        # and the session dispatcher both call this, and the later call must not report an older state.
        # A hold already dropped (resigned, or replaced by a new term) reports nothing.
        with self._notify:
            if self._hold is not hold:
                return
            state = hold.state
            if state == LOST:
                self.lost.set()
                self._end_term()
            self._set_state(LEADER if state == HELD else state)

    def _set_state(self, state: str) -> None:
        with self._notify:  # (reentrant: listeners may resign)
            super()._set_state(state)

    @property
    def state(self) -> ElectionState:
        """``"idle"``, ``"candidate"``, ``"leader"``, ``"suspended"`` or ``"lost"``."""
        return self._state  # type: ignore[return-value]

    @property
    def is_leader(self) -> bool:
        """True only while leadership is certain (see :attr:`Lock.is_held <zkrecipes.FairLock.is_held>`)."""
        hold = self._hold
        return hold is not None and hold.state == HELD and not hold.stale()

    @property
    def token(self) -> Optional[int]:
        """Fencing token of this term (the czxid of our node) while leader or suspended, else None."""
        hold = self._hold
        return hold.token if hold is not None and hold.state != LOST else None

    @property
    def node(self) -> Optional[str]:
        """Full path of our node from election until resign (kept while suspended or lost), else None."""
        hold = self._hold
        return hold.node if hold is not None else None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.path!r} state={self._state}>"


class Terms:
    """The term loop (:meth:`ElectionCore._term_steps`) as a front drives it, written once for both: iterate
    for what to do next (a campaign's or a step-down's steps, or :data:`LEAD`), and answer each inside
    ``with terms:`` by setting :attr:`sent` -- an exception raised there (a cancel, Ctrl-C too) is thrown
    into the loop instead. :attr:`result` is the loop's value once the iteration ends; its error is raised."""

    __slots__ = ("_steps", "_error", "sent", "result")

    def __init__(self, steps: Generator[Any, Any, Any]) -> None:
        self._steps = steps
        self._error: Optional[BaseException] = None
        self.sent: Any = None  # the answer to the item just taken
        self.result: Any = None

    def __iter__(self) -> "Terms":
        return self

    def __next__(self) -> Any:
        send, error, self.sent, self._error = self.sent, self._error, None, None
        try:
            return self._steps.throw(error) if error is not None else self._steps.send(send)
        except StopIteration as done:
            self.result = done.value
            raise StopIteration from None

    def __enter__(self) -> "Terms":
        return self

    def __exit__(self, kind: Any, error: Optional[BaseException], tb: Any) -> bool:
        if error is not None:
            self.sent, self._error = None, error
        return True  # (thrown into the loop by the next step)


class LeaderElection(Threaded, ElectionCore):
    """Leader election among the candidates of ``path``; at most one leader at a time.

    ``LeaderElection(zk, "/election/reports", identifier="worker-7")`` -- also ``host=``, ``acl=``,
    ``retry=``, ``tolerate_suspended=`` and ``protocol=`` as for :class:`~zkrecipes.FairLock`
    (``"kazoo"``: kazoo's ``Election``; ``"curator"``: Curator's ``LeaderLatch``).

    States (told to listeners as ``fn(election, state)``, never on kazoo's threads): ``"idle"``,
    ``"candidate"``, ``"leader"``, ``"suspended"`` (connection dropped; leadership uncertain),
    ``"lost"`` (session expired or suspended past the session timeout: another candidate may lead now).
    Unlike a lock, :meth:`resign` and :meth:`cancel` may be called from any thread.
    """

    def campaign(self, timeout: Optional[float] = None) -> bool:
        """Become a candidate and wait until leader; True once leader (at once if already leader).

        Returns False when ``timeout`` passes or :meth:`cancel`/:meth:`resign` is called meanwhile -- even
        one that comes as ZooKeeper grants leadership; our node is then deleted. Raises LockError if
        another thread is already campaigning.
        """
        timeout = naming.validate_timeout(timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        return self._run(self._campaign(fresh=True), deadline)

    def resign(self) -> None:
        """Leave the queue: a pending :meth:`campaign` returns False; a leader deletes its node and the
        next candidate in line takes over. Idempotent; callable from any thread."""
        self.cancel()
        self._run(self._step_down())

    def __enter__(self) -> "LeaderElection":
        """``with election:`` campaigns without a timeout and resigns on exit (as ``async with`` does in
        :mod:`zkrecipes.aio`). Raises LockCancelled if :meth:`cancel` stopped the campaign."""
        if not self.campaign():
            raise LockCancelled(f"campaign for {self.path} was cancelled")
        return self

    def __exit__(self, *exc: object) -> None:
        self.resign()

    def run(
        self, func: Callable[..., R], *args: Any, requeue: bool = False, stop: bool = False, **kwargs: Any
    ) -> Optional[R]:
        """Campaign, call ``func(*args, **kwargs)`` as leader, resign when it returns or raises.

        Returns what ``func`` returned. If ``func`` raises, resign and re-raise. If leadership was lost
        while ``func`` ran (the session expired, or the lost deadline passed: before another candidate
        can lead), resign and raise :class:`~zkrecipes.LockLost` once ``func`` returns, as the asyncio
        :meth:`aio.LeaderElection.run <zkrecipes.aio.LeaderElection.run>` does. With ``requeue=True``
        campaign again after each term, a lost one included (a worker pool keeps a leader), until
        :meth:`cancel` or :meth:`resign` is called from another thread; returns None then (after the
        current term, if one is running). A LockLost that ``func`` raises itself (from :meth:`check`)
        ends its term as a lost one.

        A thread cannot be interrupted: ``func`` runs on after leadership is lost unless it looks. With
        ``stop=True`` it is called as ``func(stop, *args, **kwargs)``, ``stop`` a :class:`threading.Event`
        set when the term ends -- leadership lost or :meth:`resign` called from another thread -- and it
        should return then. Before each side effect it still calls :meth:`check` (which also refuses a
        suspended leadership) or reads :attr:`lost`.
        """
        if not callable(func):
            raise TypeError(f"func must be callable, got {func!r}")
        if not isinstance(requeue, bool):
            raise TypeError(f"requeue must be a bool, got {requeue!r}")
        if not isinstance(stop, bool):
            raise TypeError(f"stop must be a bool, got {stop!r}")
        return self._terms(func, args, kwargs, requeue, stop, fresh=True)

    def _terms(
        self, func: Callable[..., R], args: Tuple[Any, ...], kwargs: Dict[str, Any], requeue: bool, stop: bool,
        fresh: bool,
    ) -> Optional[R]:
        """run()'s terms (:meth:`ElectionCore._term_steps`) on the calling thread."""
        terms = self._terms_of(requeue, fresh)
        for op in terms:
            with terms:  # (Ctrl-C too: the loop steps down)
                terms.sent = self._lead(func, args, kwargs, stop) if op is LEAD else self._run(op)
        return terms.result  # type: ignore[no-any-return]

    def _lead(self, func: Callable[..., R], args: Tuple[Any, ...], kwargs: Dict[str, Any], stop: bool) -> R:
        """Call ``func`` as leader (with the stop event if ``stop``); LockLost once it returns if the term was
        lost meanwhile (a thread cannot be interrupted: it is told afterwards)."""
        ended = threading.Event()
        forget = self._on_term_end(ended.set)
        try:
            result = func(ended, *args, **kwargs) if stop else func(*args, **kwargs)
        finally:
            forget()
        if ended.is_set() and self.lost.is_set():
            raise self._lost_term("the leader's function returned after it")
        return result

    def check(self) -> None:
        """Return if leadership is certain; raise LockLost if lost, uncertain (suspended, unless
        ``tolerate_suspended``) or not held. After the process stood still it first asks ZooKeeper,
        as :meth:`FairLock.check <zkrecipes.FairLock.check>` does."""
        self._run(self._check())

    def contenders(self) -> List[Contender]:
        """Candidates in queue order (the first is the leader); ``[]`` if nobody campaigns. Connection
        errors are raised, not hidden."""
        return super().contenders()

    def leader(self) -> Optional[Contender]:
        """Who leads now (readable by anyone, candidate or not), or None."""
        c = self.contenders()
        return c[0] if c else None

    def watch_leader(self, fn: Callable[[Optional[Contender]], None]) -> "LeaderWatch":
        """Call ``fn(leader_or_None)`` now and whenever the leader changes, from a thread of its own,
        until the returned :class:`LeaderWatch` is stopped. For observers that are not candidates."""
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {fn!r}")
        return LeaderWatch(self, fn)


class LeaderWatch:
    """Follows the leader of an election on a background thread; :meth:`stop` ends it.

    Made by :meth:`LeaderElection.watch_leader` (and :meth:`aio.LeaderElection.watch_leader
    <zkrecipes.aio.LeaderElection.watch_leader>`), which document the callback.
    """

    def __init__(self, election: ElectionCore, fn: Callable[[Optional[Contender]], None]) -> None:
        self._client, self._path, self._retry = election.client, election.path, election.retry
        self._fn = fn
        self._stop = threading.Event()
        self._changed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zkrecipes-leader-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        """The shared child-watch loop (:func:`zkrecipes._queue_watch.watch_queue`) on this thread, until stopped."""
        self._last: Any = object()  # the leader's node last delivered
        watch_queue(self._client, self._path, self._retry, self._on_listing, self._stop, self._changed, 0.5,
               retry_after=self._retry_after)

    def _on_listing(self, listed: List[Listed], fresh: bool) -> None:
        leader = listed[0].contender if listed else None  # the head of the queue
        key = leader.node if leader else None
        if fresh and key != self._last and not self._stop.is_set():
            self._last = key
            self._deliver(leader)

    def _retry_after(self, error: Exception) -> float:
        if isinstance(error, retry.TRANSIENT + (SessionExpiredError, LockError)):  # reconnecting: watch again
            return 0.2
        log.error("leader watch on %s failed; retrying", self._path, exc_info=error)
        return 0.5

    def _deliver(self, leader: Optional[Contender]) -> None:
        """Call the callback (here, on the watch's thread; the asyncio front hands it to its loop)."""
        if self._stop.is_set():
            return
        try:
            self._fn(leader)
        except Exception:
            log.exception("leader watch callback %r failed", self._fn)

    def stop(self, timeout: float = 5.0) -> None:
        """Stop following and wait (up to ``timeout``) for the thread to end; no call of the callback
        starts after this. Idempotent; may be called from the callback itself."""
        self._stop.set()
        self._changed.set()
        if threading.current_thread() is not self._thread and self._joins:
            self._thread.join(timeout)

    _joins = True  # stop() waits for the thread (not on an event loop: the thread ends by itself)
