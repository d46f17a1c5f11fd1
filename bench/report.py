"""Targets of issue 7, and the markdown table and PNG plot of a result."""

from __future__ import annotations

from typing import Optional

from .harness import pyplot, save_figure
from .measures import EXCL, FAIR, FLOOR, FLOOR_LIST, K_LOCK, RW_READ


def _find(rows: list, **kw) -> Optional[dict]:
    for r in rows:
        if all(r.get(k) == v for k, v in kw.items()):
            return r
    return None


def targets(result: dict) -> list:
    """Each target of issue 7 with its limit, measured value and verdict (None = not measured)."""
    out = []
    un = result["uncontended"]
    fair = _find(un["rows"], impl=FAIR)
    kaz = _find(un["rows"], impl=K_LOCK)
    out.append(
        {
            "target": "uncontended FairLock acquire+release / uncontended floor",
            "limit": "<= 1.15",
            "measured": fair["ratio_to_floor"],
            "context": f"kazoo Lock {kaz['ratio_to_floor']:.2f}x; per-block FairLock ratios "
            + ", ".join(f"{x:.2f}" for x in fair["ratio_to_floor_blocks"])
            + f"; FairLock ops without parent re-creation {_f(fair['usual_ratio_to_floor'])}x; "
            f"create2+get_children pipelined {_f(_find(un['rows'], impl=FLOOR_LIST)['ratio_to_floor'])}x",
            "met": fair["ratio_to_floor"] <= 1.15,
        }
    )
    co = result["contended"]
    n8 = 8 if _find(co["rows"], impl=FAIR, sessions=8) else max(r["sessions"] for r in co["rows"])
    f8 = _find(co["rows"], impl=FAIR, sessions=n8)
    k8 = _find(co["rows"], impl=K_LOCK, sessions=n8)
    out.append(
        {
            "target": f"contended handoff median, FairLock / kazoo Lock at N = {n8}",
            "limit": "<= 0.8",
            "measured": f8["ratio_to_kazoo_lock"],
            "context": f"FairLock {_f(f8['ratio_to_handoff_floor'])}x and kazoo Lock "
            f"{_f(k8['ratio_to_handoff_floor'])}x the handoff floor; per-rep FairLock/kazoo "
            + ", ".join(f"{x:.2f}" for x in f8["ratio_to_kazoo_lock_by_rep"] if x is not None),
            "met": f8["ratio_to_kazoo_lock"] is not None and f8["ratio_to_kazoo_lock"] <= 0.8,
        }
    )
    he = result["herd"]
    wmax = max(he["sizes"])
    fw = _find(he["rows"], impl=FAIR, waiters=wmax)
    out.append(
        {
            "target": f"FairLock watch notifications per release at W = {wmax}",
            "limit": "== 1 (every release)",
            "measured": fw["notifications_per_release"],
            "context": f"min {fw['notifications_min']}, max {fw['notifications_max']} over {fw['cycles']} releases",
            "met": fw["notifications_min"] == 1 and fw["notifications_max"] == 1,
        }
    )
    wmin = min(he["sizes"])
    out.append(
        {
            "target": f"FairLock handoff median at W = {wmax} / at W = {wmin}",
            "limit": "<= 1.5",
            "measured": fw["ratio_to_smallest_w"],
            "context": f"{fw['handoff']['median_ms']:.2f} ms vs "
            f"{_find(he['rows'], impl=FAIR, waiters=wmin)['handoff']['median_ms']:.2f} ms",
            "met": fw["ratio_to_smallest_w"] is not None and fw["ratio_to_smallest_w"] <= 1.5,
        }
    )
    peak = _find(result["read_write"]["peak"], impl=RW_READ)
    out.append(
        {
            "target": f"{peak['readers']} readers: peak holders",
            "limit": f"== {peak['readers']}",
            "measured": peak["peak"],
            "context": "minimum over reps " + str(peak["peak_by_rep"]),
            "met": peak["peak"] == peak["readers"],
        }
    )
    return out


def _f(x, digits: int = 2) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _req(d: dict, digits: int = 1) -> str:
    return ", ".join(f"{k} {v:.{digits}f}" for k, v in d.items() if v >= 0.05) or "–"


def _section(*paragraphs: str, columns: str) -> list:
    """A section's opening lines: each paragraph after a blank line, then a blank line and the head of a
    table of ``columns`` (``"a | b | c"``)."""
    out: list = []
    for p in paragraphs:
        out += ["", p]
    return out + ["", f"| {columns} |", "|" + "---|" * (columns.count("|") + 1)]


def markdown(result: dict) -> str:
    m = result["meta"]
    mc = m["machine"]
    lines = [
        f"Run {m['started']} · `{m['command']}` · {m['duration_s']:.0f} s · commit {mc.get('commit', '?')}"
        + (" · **smoke run: sizes too small for conclusions**" if m["smoke"] else ""),
        "",
        f"Machine: {mc.get('cpu_model', '?')}, {mc.get('cpus')} CPUs, {mc.get('memory_gib')} GiB, "
        f"{mc.get('platform')}; Python {mc.get('python')}, kazoo {mc.get('kazoo')}, tenacity {mc.get('tenacity')}; "
        f"ZooKeeper {m['zookeeper']} ({m['ensemble']}); {mc.get('java')}. "
        f"Load average at start {_f(mc['loadavg_start'][0])}, at end {_f(m['loadavg_end'][0])}.",
        "",
        f"Redis: {m['redis']}",
    ]
    lines += _section("### Targets (issue 7)", columns="target | limit | measured | met | context")
    for t in result["targets"]:
        met = "yes" if t["met"] else "**no**"
        lines.append(f"| {t['target']} | {t['limit']} | {_f(t['measured'])} | {met} | {t['context']} |")
    un = result["uncontended"]
    lines += _section(
        f"### 1. Uncontended acquire+release (one session, implementations alternating op by op, "
        f"{un['ops_per_impl']} ops each)",
        f"Anchor: uncontended floor = {FLOOR}, median {_f(un['anchor']['median_ms'], 3)} ms.",
        columns="implementation | median ms | p99 ms | × floor | × floor per block | × floor, usual ops only "
        "| client CPU µs/op | ZK requests/op",
    )
    for r in un["rows"]:
        blocks = " ".join(_f(x) for x in r["ratio_to_floor_blocks"])
        lines.append(
            f"| {r['impl']} | {_f(r['median_ms'], 3)} | {_f(r['p99_ms'], 2)} | {_f(r['ratio_to_floor'])} | {blocks} "
            f"| {_f(r['usual_ratio_to_floor'])} ({r['usual_ops']} ops with {r['usual_requests_per_op']} requests) "
            f"| {r['cpu_us_per_op']:.0f} | {_req(r['requests_per_op'], 2)} |"
        )
    co = result["contended"]
    lines += _section(
        f"### 2. Contended handoff and throughput ({co['mode']}; {co['reps']} reps × {co['duration_s']} s per "
        "implementation and N, alternating run by run)",
        f"Anchor: handoff floor = delete → watch callback on a second session, median "
        f"{_f(co['anchor']['median_ms'], 3)} ms, p99 {_f(co['anchor']['p99_ms'])} ms (n = {co['anchor']['n']}).",
        columns="implementation | N | handoff median ms | p99 ms | × handoff floor | × kazoo Lock (per rep) "
        "| acquires/s | ZK requests per acquire+release | notifications/release | same-session re-acquires",
    )
    for r in co["rows"]:
        reps = " ".join(_f(x) for x in r["ratio_to_kazoo_lock_by_rep"])
        lines.append(
            f"| {r['impl']} | {r['sessions']} | {_f(r['handoff']['median_ms'])} | {_f(r['handoff']['p99_ms'])} "
            f"| {_f(r['ratio_to_handoff_floor'])} | {_f(r['ratio_to_kazoo_lock'])} ({reps}) "
            f"| {_f(r['throughput_per_s'], 0)} | {_f(r['requests_total_per_acquire'], 1)}: "
            f"{_req(r['requests_per_acquire'])} | {_f(r['notifications_per_release'])} | {r['self_reacquire']} |"
        )
    he = result["herd"]
    lines += _section(
        f"### 3. Herd ({he['mode']}; W waiters behind one holder, steady state, counted at the clients)",
        columns="implementation | W | notifications per release (min–max) | ZK requests per acquire+release cycle "
        "| handoff median ms | p99 ms | × smallest W | server watches left after run",
    )
    for r in he["rows"]:
        lines.append(
            f"| {r['impl']} | {r['waiters']} | {_f(r['notifications_per_release'], 1)} "
            f"({_f(r['notifications_min'])}–{_f(r['notifications_max'])}) "
            f"| {_f(r['requests_total_per_cycle'], 1)}: {_req(r['requests_per_cycle'])} "
            f"| {_f(r['handoff']['median_ms'])} | {_f(r['handoff']['p99_ms'])} | {_f(r['ratio_to_smallest_w'])} "
            f"| {', '.join(_f(x) for x in r['server_watches_left'])} |"
            + (f" warm-up cut short in {r['warmup_cut']} run(s)" if r.get("warmup_cut") else "")
            + (f" measuring cut short in {r['cut_short']} run(s)" if r.get("cut_short") else "")
        )
    rw = result["read_write"]
    lines += _section(
        "### 4. Read/write",
        columns="readers (one session each) | implementation | peak holders | all held after ms",
    )
    for r in rw["peak"]:
        lines.append(f"| {r['readers']} | {r['impl']} | {r['peak']} | {_f(r['all_held_after_ms'], 1)} |")
    ms = rw["mixed_setup"]
    lines += _section(
        f"Mixed {int(ms['read_fraction'] * 100)}/{100 - int(ms['read_fraction'] * 100)} read/write, "
        f"hold {ms['hold_ms']} ms, think ~{ms['think_mean_ms']} ms (exponential), {ms['reps']} × "
        f"{ms['duration_s']} s:",
        columns="implementation | sessions | read wait p50 ms | read p99 ms | write wait p50 ms | write p99 ms | reads "
        "| writes | ZK requests per acquire+release | notifications per acquire",
    )
    for r in rw["mixed"]:
        lines.append(
            f"| {r['impl']} | {r['sessions']} | {_f(r['read_wait']['median_ms'])} | {_f(r['read_wait']['p99_ms'])} "
            f"| {_f(r['write_wait']['median_ms'])} | {_f(r['write_wait']['p99_ms'])} | {r['read_wait']['n']} "
            f"| {r['write_wait']['n']} | {_f(r['requests_per_acquire'], 1)} | {_f(r['notifications_per_acquire'])} |"
        )
    ss = rw["starvation_setup"]
    lines += _section(
        f"Writer while readers keep arriving (each reader holds {_f(ss['reader_hold_ms'], 0)} ms and re-queues at "
        f"once, staggered; a writer asks every {_f(ss['writer_every_ms'], 0)} ms):",
        columns="implementation | readers | writer wait p50 ms | p99 ms | max ms | writer timeouts | reads",
    )
    for r in rw["starvation"]:
        w = r["writer_wait"]
        lines.append(
            f"| {r['impl']} | {r['readers']} | {_f(w['median_ms'])} | {_f(w['p99_ms'])} | {_f(w['max_ms'])} "
            f"| {r['writer_timeouts']} | {r['reads']} |"
        )
    oc = result["one_client"]
    lines += _section(
        f"### 5. One process: {oc['mode']}, one lock ({oc['reps']} × {oc['duration_s']} s)",
        columns="implementation | threads | think ms | acquires/s | handoff median ms | p99 ms "
        "| ZK requests per acquire | notifications/release | acquires per thread min–max",
    )
    for r in oc["rows"]:
        lines.append(
            f"| {r['impl']} | {r['threads']} | {_f(r['think_ms'], 0)} | {_f(r['throughput_per_s'], 0)} "
            f"| {_f(r['handoff']['median_ms'])} "
            f"| {_f(r['handoff']['p99_ms'])} | {_f(r['requests_total_per_acquire'], 1)}: "
            f"{_req(r['requests_per_acquire'])} | {_f(r['notifications_per_release'])} "
            f"| {r['min_max_per_thread'][0]}–{r['min_max_per_thread'][1]} |"
        )
    se = result.get("semaphore")
    if se:
        lines += _section(
            f"### 6. Semaphore ({se['mode']}; N holders, W waiters; at a quiet point the oldest or the newest "
            "holder releases and re-queues; counted at the clients)",
            columns="implementation | N | W | releaser | notifications per release (min–max) "
            "| ZK requests per release+handoff+re-queue | handoff median ms | p99 ms | × kazoo | peak holders",
        )
        for r in se["rows"]:
            lines.append(
                f"| {r['impl']} | {r['max_leases']} | {r['waiters']} | {r['releaser']} "
                f"| {_f(r['notifications_per_release'], 1)} "
                f"({_f(r['notifications_min'])}–{_f(r['notifications_max'])}) "
                f"| {_f(r['requests_total_per_cycle'], 1)}: {_req(r['requests_per_cycle'])} "
                f"| {_f(r['handoff']['median_ms'])} | {_f(r['handoff']['p99_ms'])} | {_f(r['ratio_to_kazoo'])} "
                f"| {r['peak_holders']} |"
            )
    tr = result.get("tries")
    if tr:
        lines += _section(
            f"### 7. Non-blocking tries: `acquire(blocking=False)` ({tr['tries_per_impl']} tries each, one session, "
            "implementations alternating try by try; counted at the client)",
            columns="implementation | held by another session: requests per failed try | writes | median ms "
            "| free: requests per try + release | median ms | blocking acquire + release median ms",
        )
        for r in tr["rows"]:
            h, f, b = r["held"], r["free"], r["blocking"]
            lines.append(
                f"| {r['impl']} | {_f(h['requests_total_per_op'], 1)}: {_req(h['requests_per_op'])} "
                f"| {_f(h['writes_per_op'], 1)} | {_f(h['median_ms'], 3)} "
                f"| {_f(f['requests_total_per_op'], 1)}: {_req(f['requests_per_op'])} | {_f(f['median_ms'], 3)} "
                f"| {_f(b['median_ms'], 3)} |"
            )
    pr = result.get("profile")
    if pr:
        lines += _section(
            f"### Profile: uncontended FairLock acquire+release ({pr['ops']} ops, {pr['timer']})",
            f"Profiled: {_f(pr['profiled_wall_ms_per_op'], 3)} ms wall/op, calling thread "
            f"{pr['thread_cpu_us_per_op']:.0f} µs CPU/op, whole process {pr['profiled_process_cpu_us_per_op']:.0f} "
            "µs CPU/op.",
            columns="function | calls/op | self µs/op | cumulative µs/op",
        )
        for r in pr["top"][:20]:
            lines.append(
                f"| `{r['function']}` | {_f(r['calls_per_op'], 1)} | {_f(r['self_us_per_op'], 1)} "
                f"| {_f(r['cumulative_us_per_op'], 1)} |"
            )
        lines += _section(
            "Unprofiled cost of pure-Python steps (best of 5 × 2000 calls):",
            columns="step | µs per call",
        )
        for label, us in pr.get("micro_us", {}).items():
            lines.append(f"| {label} | {_f(us, 1)} |")
    return "\n".join(lines) + "\n"


def plot(result: dict, path: str) -> Optional[str]:
    """Write the PNG; return None, or why it could not be drawn."""
    plt = pyplot()
    if plt is None:
        return "matplotlib is not installed (it is in the 'bench' extra)"
    fig, axes = plt.subplots(2, 4, figsize=(22, 9.5))
    ax = axes[0][0]
    un = result["uncontended"]["rows"]
    names = [r["impl"] for r in un]
    ax.barh(range(len(un)), [r["ratio_to_floor"] for r in un], color="tab:blue")
    ax.axvline(1.0, color="k", lw=0.8)
    ax.axvline(1.15, color="tab:red", ls="--", lw=0.8, label="target 1.15")
    ax.set_yticks(range(len(un)))
    ax.set_yticklabels([n.replace(" + get_children pipelined", "+list") for n in names], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("median acquire+release / floor")
    ax.set_title("1. Uncontended (× floor)")
    ax.legend(fontsize=7)
    co = result["contended"]
    for ax, key, label in (
        (axes[0][1], "handoff", "handoff median ms"),
        (axes[0][2], "throughput_per_s", "acquires/s"),
    ):
        for impl in (FAIR, EXCL, K_LOCK):
            rows = [r for r in co["rows"] if r["impl"] == impl]
            ys = [r[key]["median_ms"] if key == "handoff" else r[key] for r in rows]
            ax.plot([r["sessions"] for r in rows], ys, marker="o", label=impl)
        if key == "handoff":
            ax.axhline(co["anchor"]["median_ms"], color="k", ls=":", label="handoff floor")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("sessions N")
        ax.set_ylabel(label)
        ax.set_title("2. Contended " + ("handoff" if key == "handoff" else "throughput"))
        ax.legend(fontsize=7)
    he = result["herd"]
    for ax, key, label in (
        (axes[1][0], "notifications_per_release", "watch notifications per release"),
        (axes[1][1], "handoff", "handoff median ms"),
    ):
        for impl in (EXCL, FAIR, K_LOCK):
            rows = [r for r in he["rows"] if r["impl"] == impl]
            ys = [r[key]["median_ms"] if key == "handoff" else max(r[key], 0.1) for r in rows]
            style = {"ls": "--", "marker": "s"} if impl == FAIR else {"marker": "o"}
            ax.plot([r["waiters"] for r in rows], ys, label=impl, **style)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("waiters W")
        ax.set_ylabel(label)
        ax.set_title("3. Herd: " + label)
        ax.legend(fontsize=7)
    ax = axes[1][2]
    oc = result["one_client"]["rows"]
    thinks = sorted({r["think_ms"] for r in oc})
    impls = [EXCL, FAIR, K_LOCK]
    width = 0.8 / len(thinks)
    for k, think in enumerate(thinks):
        vals = [
            next((r["throughput_per_s"] for r in oc if r["impl"] == i and r["think_ms"] == think), 0) for i in impls
        ]
        ax.bar([x + k * width for x in range(len(impls))], vals, width, label=f"think {think:.0f} ms")
    ax.set_xticks([x + width * (len(thinks) - 1) / 2 for x in range(len(impls))])
    ax.set_xticklabels([i.replace("zkrecipes ", "") for i in impls], fontsize=8)
    ax.set_ylabel("acquires/s")
    ax.set_title(f"5. {oc[0]['threads']} threads on one session")
    ax.legend(fontsize=7)
    ax = axes[0][3]
    mixed = result["read_write"]["mixed"]
    labels = ["read p50", "read p99", "write p50", "write p99"]
    for k, r in enumerate(mixed):
        vals = [
            r["read_wait"]["median_ms"],
            r["read_wait"]["p99_ms"],
            r["write_wait"]["median_ms"],
            r["write_wait"]["p99_ms"],
        ]
        ax.bar([x + k * 0.4 for x in range(4)], [v or 0 for v in vals], 0.4, label=r["impl"])
    ax.set_xticks([x + 0.2 for x in range(4)])
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel("wait ms")
    ax.set_title(f"4. RW 90/10 mix, {mixed[0]['sessions']} sessions")
    ax.legend(fontsize=7)
    ax = axes[1][3]
    starve = result["read_write"]["starvation"]
    for k, r in enumerate(starve):
        w = r["writer_wait"]
        ax.bar(
            [x + k * 0.4 for x in range(3)],
            [w["median_ms"] or 0, w["p99_ms"] or 0, w["max_ms"] or 0],
            0.4,
            label=r["impl"],
        )
    hold = result["read_write"]["starvation_setup"]["reader_hold_ms"]
    ax.axhline(hold, color="k", ls=":", label=f"one reader hold ({hold:.0f} ms)")
    ax.set_xticks([x + 0.2 for x in range(3)])
    ax.set_xticklabels(["p50", "p99", "max"], fontsize=8)
    ax.set_ylabel("writer wait ms")
    ax.set_title("4. Writer wait while readers keep arriving")
    ax.legend(fontsize=7)
    m = result["meta"]
    save_figure(plt, fig, path, 90, f"zkrecipes bench {m['started']} ({m['ensemble']}){' SMOKE' if m['smoke'] else ''}")
    return None
