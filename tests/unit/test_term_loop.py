"""run()'s term loop (ElectionCore._term_steps), written once for both fronts, driven by a script: what it
asks the front to do (campaign, LEAD, step down) and what it returns or raises for each outcome of a term.
No ZooKeeper: the campaign's and the step-down's steps are only named, never run."""

from __future__ import annotations

from typing import Any, List, Optional

import pytest
from kazoo.client import KazooClient

from zkrecipes import LeaderElection, LockLost
from zkrecipes.election import LEAD


def drive(requeue: bool, script: List[Any], cancel_after: Optional[int] = None) -> tuple:
    """Run the loop; each campaign/LEAD is answered by the next entry of ``script`` (an exception is thrown
    in). Returns ``(asked, outcome)``: what it asked for, and its return value or exception."""
    e = LeaderElection(KazooClient(), "/p")
    terms = e._term_steps(requeue, fresh=True)
    asked: List[str] = []
    send: Any = None
    error: Optional[BaseException] = None
    while True:
        try:
            op = terms.throw(error) if error is not None else terms.send(send)
        except StopIteration as done:
            return asked, done.value
        except Exception as exc:
            return asked, exc
        if op is LEAD:
            asked.append("lead")
            answer = script.pop(0)
            if cancel_after is not None and asked.count("lead") == cancel_after:
                e._cancelled = True  # cancel() from elsewhere during this term
        else:
            name = op.gi_code.co_name
            op.close()  # (never run: no ZooKeeper here)
            asked.append("step_down" if name == "_step_down" else "campaign")
            answer = None if name == "_step_down" else script.pop(0)
        send, error = (None, answer) if isinstance(answer, BaseException) else (answer, None)


def test_a_term_returns_the_leaders_result_after_stepping_down():
    assert drive(False, [True, "result"]) == (["campaign", "lead", "step_down"], "result")


def test_a_campaign_that_ends_without_leadership_returns_none():
    assert drive(False, [False]) == (["campaign"], None)


def test_a_lost_term_raises_lock_lost_after_stepping_down():
    asked, outcome = drive(False, [True, LockLost("lost")])
    assert asked == ["campaign", "lead", "step_down"] and isinstance(outcome, LockLost)


def test_with_requeue_a_lost_term_campaigns_again_until_cancelled():
    asked, outcome = drive(True, [True, LockLost("lost"), True, "ok"], cancel_after=2)
    assert asked == ["campaign", "lead", "step_down", "campaign", "lead", "step_down"] and outcome is None


@pytest.mark.parametrize("requeue", [False, True])
def test_another_error_of_the_leader_steps_down_and_is_raised(requeue):
    asked, outcome = drive(requeue, [True, ValueError("boom")])
    assert asked == ["campaign", "lead", "step_down"] and isinstance(outcome, ValueError)


def test_a_failed_campaign_is_raised_with_nothing_to_step_down():
    asked, outcome = drive(True, [RuntimeError("stopped")])
    assert asked == ["campaign"] and isinstance(outcome, RuntimeError)


def drive_terms(requeue: bool, script: List[Any]) -> tuple:
    """As :func:`drive`, through :class:`zkrecipes.election.Terms` (what both fronts' run() iterate)."""
    terms = LeaderElection(KazooClient(), "/p")._terms_of(requeue, fresh=True)
    asked: List[str] = []
    try:
        for op in terms:
            with terms:
                if op is LEAD:
                    asked.append("lead")
                    answer = script.pop(0)
                else:
                    step_down = op.gi_code.co_name == "_step_down"
                    op.close()
                    asked.append("step_down" if step_down else "campaign")
                    answer = None if step_down else script.pop(0)
                if isinstance(answer, BaseException):
                    raise answer  # what the front raised is thrown into the loop
                terms.sent = answer
    except BaseException as exc:  # (Ctrl-C too: raised once the loop has stepped down)
        return asked, exc
    return asked, terms.result


def test_terms_returns_the_loops_result_and_raises_its_error():
    assert drive_terms(False, [True, "result"]) == (["campaign", "lead", "step_down"], "result")
    assert drive_terms(False, [False]) == (["campaign"], None)
    asked, outcome = drive_terms(False, [True, LockLost("lost")])
    assert asked == ["campaign", "lead", "step_down"] and isinstance(outcome, LockLost)


def test_terms_throws_a_base_exception_in_so_the_loop_steps_down():
    asked, outcome = drive_terms(True, [True, KeyboardInterrupt()])
    assert asked == ["campaign", "lead", "step_down"] and isinstance(outcome, KeyboardInterrupt)
