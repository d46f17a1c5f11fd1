"""The safety lab's verdict and its reports: :func:`assemble` turns the checked trials into one results
dict (a run fails on any zkrecipes entry's hard check, a trial's own failed check, or a holder fault
kind that struck no holder); :func:`markdown`, :func:`rst` and :func:`write_results` write it out."""

from __future__ import annotations

import datetime
import json
import os

from .catalog import BASELINES, FAULT_KINDS, HOLDER_FAULTS, IMPL_NAMES, TOKENS, Settings, hard_checks


def _command(st: Settings) -> str:
    if getattr(st, "argv", None) is not None:
        import shlex

        return " ".join(["python -m lab.run"] + [shlex.quote(a) for a in st.argv])
    return "python -m lab.run" + (" --long" if st.long else "") + f" --seed {st.seed}"


def assemble(st: Settings, checked: dict, skipped: dict, envinfo: dict, duration: float) -> dict:
    rows, totals = [], {}
    for trial, res in checked.items():
        for impl, r in res["impls"].items():
            t = dict(r["totals"])
            t["trial"] = trial
            t["name"] = IMPL_NAMES[impl]
            t["fencing_token"] = TOKENS[impl]
            t["findings"] = t["findings"][:50]
            t["baseline"] = impl in BASELINES
            totals[impl] = t
            extra = tuple(k for k in r["rows"] if k not in FAULT_KINDS and k != "none")
            own_rows = impl == "cli" or t.get("own_rows_only")
            for kind in (tuple(r["rows"]) if own_rows else ("none",) + FAULT_KINDS + extra):
                row = r["rows"].get(kind)
                rows.append({"impl": impl, "name": IMPL_NAMES[impl], "fault": kind,
                             **(row if row is not None else {"applicable": False})})
    failures = []
    for impl, t in totals.items():
        if t["baseline"]:
            continue
        for key in hard_checks(impl):
            if key not in t:
                failures.append(f"{IMPL_NAMES[impl]}: {key} was not measured")
            elif t[key]:
                failures.append(f"{IMPL_NAMES[impl]}: {key} = {t[key]}")
        if t.get("notices_got", 0) < t.get("notices_needed", 0):
            failures.append(f"{IMPL_NAMES[impl]}: missed notices = {t['notices_needed'] - t['notices_got']}")
        failures += [f"{IMPL_NAMES[impl]}: {m}" for m in t.get("failed_checks", [])]  # a trial's own checks
        if impl in ("rw", "aio-rw") and not t.get("readers_overlapped"):
            failures.append(f"{IMPL_NAMES[impl]}: readers never held the lock together")
    failures += unexercised(checked)
    return {
        "command": _command(st),
        "seed": st.seed,
        "mode": "long" if st.long else ("short" if st.repeat == 1 and not st.repeats and not st.faults else "custom"),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "duration_s": round(duration, 1),
        "workers": st.workers,
        "session_timeout_s": st.session_timeout,
        "repeat": st.repeat,
        "repeat_per_trial": dict(st.repeats),
        "environment": envinfo,
        "skipped": skipped,
        "totals": totals,
        "rows": rows,
        "failures": failures,
        "passed": not failures,
    }


def unexercised(checked: dict) -> list:
    """Failures for a trial with a zkrecipes entry in which a holder fault kind it scheduled struck no holder
    of any of its implementations: the run did not test what it claims to (``hits``, summed over the
    trial's entries; a kind's row exists when the kind was scheduled)."""
    out = []
    for trial, res in checked.items():
        impls = res["impls"]
        if all(impl in BASELINES for impl in impls):
            continue
        for kind in HOLDER_FAULTS:
            rows = [r["rows"][kind] for r in impls.values() if kind in r["rows"]]
            if rows and not sum(r.get("hits", 0) for r in rows):
                out.append(f"trial {trial}: {kind} struck no holder "
                           f"({max(r.get('faults', 0) for r in rows)} injected)")
    return out


def _cell(v) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def markdown(res: dict) -> str:
    """The results as markdown: a summary per implementation and one row per implementation and fault."""
    lines = [
        f"Safety lab, {res['mode']} run, `{res['command']}`, {res['date']}, {res['duration_s']:.0f} s; "
        f"{res['workers']} workers, session timeout / lease {res['session_timeout_s']:g} s, "
        f"each fault {res['repeat']}x. Environment: "
        + ", ".join(f"{k} {v}" for k, v in res["environment"].items() if k != "platform") + ".",
        "",
        "| Lock | Fencing token | Grants | Accepted writes | Final value | Lost increments | Accepted overlaps "
        "| Unsafe overlaps | Rejected ops | Out-of-order grants | Loss notices got/needed (late) | Orphans "
        "| Hung workers | Readers together |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for t in res["totals"].values():
        lines.append(
            f"| {t['name']} | {t['fencing_token']} | {t['grants']} | {t['accepted_writes']} | {t['final_value']} "
            f"| {t['lost_increments']} | {t['accepted_overlaps']} | {t['unsafe']} | {t['ops_rejected']} "
            f"| {t['out_of_order']} | {t['notices_got']}/{t['notices_needed']} ({t['notices_late']}) "
            f"| {t['orphans']} | {t['hung']} | {_cell(t['readers_overlapped'])} |"
        )
    for name, why in res["skipped"].items():
        lines.append(f"| {name} trial | skipped: {why} |||||||||||||")
    notes = [f"- {t['name']}: {t['note']}" for t in res["totals"].values() if t.get("note")]
    lines += [""] + notes if notes else []
    lines += [
        "",
        "| Lock | Fault | Faults (holder hit) | Grants | Ops ok | Ops rejected | Unsafe overlaps | Accepted overlaps "
        "| Lost increments | Out-of-order grants | Loss notices got/needed (late) | Max notice delay (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        if r.get("applicable") is False:
            lines.append(f"| {r['name']} | {r['fault']} | n/a |||||||||")
            continue
        faults = "–" if r["fault"] == "none" else f"{r['faults']} ({r['hits']})"
        notices = f"{r['notices_got']}/{r['notices_needed']} ({r['notices_late']})" if r["notices_needed"] else "–"
        lines.append(
            f"| {r['name']} | {r['fault']} | {faults} | {r['grants']} | {r['ops_ok']} | {r['ops_rejected']} "
            f"| {r['unsafe']} | {r['accepted_overlaps']} | {r['lost_increments']} | {r['out_of_order']} "
            f"| {notices} | {_cell(r['max_notice_delay'])} |"
        )
    lines += ["", "Verdict for zkrecipes: " + ("PASS" if res["passed"] else "FAIL: " + "; ".join(res["failures"]))]
    return "\n".join(lines) + "\n"


def rst(res: dict) -> str:
    """The same tables as reStructuredText list-tables, for ``.. include::`` in the docs."""

    def table(title: str, header: list, body: list) -> list:
        out = [f".. list-table:: {title}", "   :header-rows: 1", ""]
        for r in [header] + body:
            out.append("   * - " + str(r[0]))
            out += [f"     - {c}" for c in r[1:]]
        return out + [""]

    summary = [[t["name"], t["fencing_token"], t["grants"], t["accepted_writes"], t["final_value"],
                t["lost_increments"], t["accepted_overlaps"], t["unsafe"], t["ops_rejected"], t["out_of_order"],
                f"{t['notices_got']}/{t['notices_needed']} ({t['notices_late']})", t["orphans"], t["hung"],
                _cell(t["readers_overlapped"])] for t in res["totals"].values()]
    per = []
    for r in res["rows"]:
        if r.get("applicable") is False:
            per.append([r["name"], r["fault"], "n/a"] + [""] * 9)
            continue
        per.append([r["name"], r["fault"], "–" if r["fault"] == "none" else f"{r['faults']} ({r['hits']})",
                    r["grants"], r["ops_ok"], r["ops_rejected"], r["unsafe"], r["accepted_overlaps"],
                    r["lost_increments"], r["out_of_order"],
                    f"{r['notices_got']}/{r['notices_needed']} ({r['notices_late']})" if r["notices_needed"] else "–",
                    _cell(r["max_notice_delay"])])
    env = ", ".join(f"{k} {v}" for k, v in res["environment"].items() if k != "platform")
    lines = [f"``{res['command']}`` ({res['mode']} run, {res['date']}, {res['duration_s']:.0f} s; "
             f"{res['workers']} workers, session timeout / lease {res['session_timeout_s']:g} s, each fault "
             f"{res['repeat']}x; {env}).", ""]
    lines += table("Per implementation", ["Lock", "Fencing token", "Grants", "Accepted writes", "Final value",
                                          "Lost increments", "Accepted overlaps", "Unsafe overlaps", "Rejected ops",
                                          "Out-of-order grants", "Loss notices got/needed (late)", "Orphans",
                                          "Hung workers", "Readers together"], summary)
    notes = [f"- {t['name']}: {t['note']}" for t in res["totals"].values() if t.get("note")]
    lines += notes + [""] if notes else []
    lines += table("Per implementation and fault", ["Lock", "Fault", "Faults (holder hit)", "Grants", "Ops ok",
                                                    "Ops rejected", "Unsafe overlaps", "Accepted overlaps",
                                                    "Lost increments", "Out-of-order grants",
                                                    "Loss notices got/needed (late)", "Max notice delay (s)"], per)
    for name, why in res["skipped"].items():
        lines += [f"The {name} trial was skipped: {why}.", ""]
    lines += ["Verdict for zkrecipes: " + ("**pass**." if res["passed"] else "**fail**: " + "; ".join(res["failures"])),
              ""]
    return "\n".join(lines)


def write_results(res: dict, out: str) -> None:
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
        f.write("\n")
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(markdown(res))
    with open(os.path.join(out, "results.inc"), "w") as f:
        f.write(rst(res))
