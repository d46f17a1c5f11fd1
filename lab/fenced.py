"""A fenced register: a shared counter in a local file that rejects stale fencing tokens.

This is the "storage" side of fencing. Every operation presents the caller's fencing token (a lock's
:attr:`~zkrecipes.FairLock.token`); the register remembers the highest tokens it has seen and rejects an
operation that presents a lower one with :class:`StaleToken`. A holder that was paused or cut off, lost
its lock and then wakes up to act on it is turned away once the next holder has touched the register.

Two kinds of operation, so that a read/write lock can be fenced too:

- *exclusive* (a writer, or any holder of an exclusive lock): accepted when the token is at least the
  highest exclusive token **and** the highest shared token seen; it raises the highest exclusive token.
- *shared* (a reader): accepted when the token is at least the highest exclusive token; it raises the
  highest shared token. Readers do not fence each other.

Reads are fenced as well as writes: a read-modify-write whose read came before the next holder's read
would otherwise lose that holder's increment. A token of ``None`` means "unfenced" (a lock with no
token): the operation is always accepted and the highest tokens are left alone.

The file is an append-only JSON-lines log, one record per operation (accepted or rejected), written
under an exclusive ``fcntl.flock`` so the token check and the update are atomic across processes; the
register's state is the last record. Each record starts with a newline, so a record torn by a process
killed mid-write is isolated and skipped. :func:`read_log` returns the whole history for a checker.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from typing import Optional

TAIL = 16384  # bytes read from the end of the log to find the last record

INITIAL = {"seq": 0, "value": 0, "writes": 0, "high_x": None, "high_s": None}


class StaleToken(Exception):
    """The register has seen a higher fencing token than the one presented; nothing was changed."""

    def __init__(self, token: int, state: dict) -> None:
        self.token = token
        self.state = state
        super().__init__(
            f"stale fencing token {token}: highest seen exclusive={state.get('high_x')} shared={state.get('high_s')}"
        )


def _ge(token: int, high: Optional[int]) -> bool:
    return high is None or token >= high


class FencedRegister:
    """A counter in file ``path`` (created if missing) that only accepts current fencing tokens.

    ``read(token)`` returns the value; ``write(token, value)`` stores it; both raise :class:`StaleToken`
    when ``token`` is lower than the register allows. ``hold`` is a free-form label of the caller's hold,
    recorded in the log for checkers. Safe across threads and processes on one machine.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "FencedRegister":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def read(self, token: Optional[int], *, hold: Optional[str] = None, shared: bool = False,
             checked: Optional[float] = None) -> int:
        """Return the value, presenting ``token`` (``shared`` for a reader of a read/write lock). ``checked``:
        when (monotonic) the holder's ``check()`` before this operation passed, kept in the record."""
        return self._op("read", token, None, hold, shared, checked)["value"]

    def write(self, token: Optional[int], value: int, *, hold: Optional[str] = None,
              checked: Optional[float] = None) -> None:
        """Store ``value``, presenting ``token`` (always an exclusive operation)."""
        if not isinstance(value, int):
            raise TypeError(f"value must be an int, got {value!r}")
        self._op("write", token, value, hold, False, checked)

    def state(self) -> dict:
        """The last record: ``value``, ``writes`` (accepted writes so far), ``high_x``, ``high_s`` ..."""
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        try:
            return self._last()
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _last(self) -> dict:
        size = os.fstat(self._fd).st_size
        if size == 0:
            return dict(INITIAL)
        n = min(size, TAIL)
        chunk = os.pread(self._fd, n, size - n)
        for line in reversed(chunk.split(b"\n")):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # torn by a killed writer
            if isinstance(rec, dict) and "seq" in rec:
                return rec
        raise RuntimeError(f"{self.path}: no intact record in the last {n} bytes")

    def _op(self, op: str, token: Optional[int], value: Optional[int], hold: Optional[str], shared: bool,
            checked: Optional[float] = None) -> dict:
        if token is not None and (isinstance(token, bool) or not isinstance(token, int)):
            raise TypeError(f"token must be an int or None, got {token!r}")
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            st = self._last()
            new = {k: st.get(k, v) for k, v in INITIAL.items()}
            if token is None:
                ok = True
            elif shared:
                ok = _ge(token, st.get("high_x"))
            else:
                ok = _ge(token, st.get("high_x")) and _ge(token, st.get("high_s"))
            if ok and token is not None:
                key = "high_s" if shared else "high_x"
                new[key] = token if new[key] is None else max(new[key], token)
            if ok and op == "write":
                new["value"] = value
                new["writes"] += 1
            new.update(
                seq=st["seq"] + 1,
                op=op,
                ok=ok,
                token=token,
                shared=shared,
                arg=value,
                seen=st.get("value", 0),
                hold=hold,
                pid=os.getpid(),
                t=time.monotonic(),
                wall=time.time(),
            )
            if checked is not None:
                new["checked"] = checked
            os.write(self._fd, b"\n" + json.dumps(new, separators=(",", ":")).encode())
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        if not ok:
            raise StaleToken(token, st)
        return new


def read_log(path: str) -> tuple:
    """Every intact record of a register's log in order, and the number of torn records skipped."""
    records, torn = [], 0
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return [], 0
    for line in data.split(b"\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            torn += 1
            continue
        records.append(rec)
    records.sort(key=lambda r: r["seq"])
    return records, torn
