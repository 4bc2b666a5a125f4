"""The PostgreSQL statements of a limited queue's admission (see :mod:`durable.engine.plan_queues`).

An admission first reads without a lock (:data:`PG_ADMIT_PEEK`) and writes
the grants chosen from it with :data:`PG_ADMIT_GRANT`, compare-and-set on the
queue row's version as read; only if another admitter granted in between
does it run as two statements in one transaction: :data:`PG_ADMIT_READ`
locks the queue row and reads everything the plan decides on; then
:data:`PG_ADMIT_GRANT` writes every grant and rewrites the queue row. A
step's result can carry the same read (:func:`admit_read`, in
:meth:`~durable.store.typed_statements.PostgresStatements.finish_step`); the
grants chosen from it are then :data:`PG_ADMIT_GRANT` alone, with the row's
version as read.

Why a read may be trusted: a statement reads with the snapshot it took when
it began, so one that waited for the previous admitter's lock would miss
that admitter's grants. Every grant therefore rewrites the queue row in the
grant's transaction. The locked read compares the row's version as locked
(the latest, ``xmin``) with the one its snapshot sees: equal, no grant
committed after the snapshot, so the slots it counted are at least those
held now (a slot freed since only makes it admit less, and the freeing write
asks for an admission of its own); different (``fresh`` false), the store
counts again with a statement that begins after the lock. The grants chosen
from an unlocked read are written only if the row, locked by the grant
statement, is still at the version read (else nothing is written and the
admission reads under the lock).

Why a result that read nothing waiting need not admit: the risk is a step
written waiting by a commit that began after the result's snapshot, whose
own admission counted the result's slot as still held. Every commit that
writes waiting steps rewrites their queue rows
(:attr:`~durable.engine.plan.CommitPlan.waited_queues`), and the result's
read takes the row ``FOR SHARE``. If the result locks first, that commit
waits for the result's commit, so the admission after it counts the slot
free. If the commit rewrote the row first, the result's lock waits for it,
or finds the row newer than its snapshot: either way the locked version
differs from the snapshot's (``fresh`` false) and the result admits under
the lock as before. So ``fresh`` with room and no candidate proves that
nothing waits that this slot could take (:func:`durable.engine.admission.after_result`).

A busy queue's result may carry its short read alone (:func:`count_read`):
it only ever decides that the result leaves its slot, which needs no lock
(see :meth:`~durable.engine.plan_queues.QueueSeen.leaves_slot`); any other
answer sends the result to an admission that reads for itself."""

from __future__ import annotations

import re

from durable.engine.vocab import ACTIVE, Admission, CheckpointStatus
from durable.store.statements import CP_TABLE, QUEUE_TABLE, RUN_TABLE, _in, q, spread

_OPEN = f"('{CheckpointStatus.PENDING}', '{CheckpointStatus.RUNNING}')"
# Only steps are admitted, so no kind is named: a read naming kind "step" and an open status
# satisfies the due-steps index's condition, and on statistics taken before a burst of waiting
# steps a generic plan took that index (leading with the status) and walked every open step.
_IN_QUEUE = f"c.{q('queue')} = %(queue)s AND c.{q('admission')} IS NOT NULL"


def _active_run(run_id: str) -> str:
    """``r`` is the run ``run_id`` names, and that run is active (its steps may hold or take a slot)."""
    # The statuses are written out, not a parameter: an array parameter's length is unknown to a
    # generic plan, which then priced these reads so high that PostgreSQL planned them afresh at
    # every call (1-2 ms each, against 0.3 ms to run one).
    return f"r.{q('id')} = {run_id} AND r.{q('status')} IN ({_in(ACTIVE)})"


_ACTIVE_RUN = _active_run(f"c.{q('run_id')}")
# A limited queue's backlog as its index (durable_cp_queue_backlog) holds it: steps not yet started.
_BACKLOG = f"{_IN_QUEUE} AND c.{q('status')} = '{CheckpointStatus.PENDING}'"
# The group after ``g`` in the index's order (priority, then key, a NULL key last): the next key
# of its priority, else its NULL key, else the first of the next priority. Each branch one probe;
# the LIMIT stops at the first that finds one.
_NEXT_GROUP = (
    " UNION ALL ".join(
        f"(SELECT c.{q('priority')} AS p, c.{q('queue_key')} AS k FROM {CP_TABLE} c WHERE {_BACKLOG} AND {cond} "
        f"ORDER BY c.{q('priority')}, c.{q('queue_key')} LIMIT 1)"
        for cond in (
            f"g.k IS NOT NULL AND c.{q('priority')} = g.p AND c.{q('queue_key')} > g.k",
            f"g.k IS NOT NULL AND c.{q('priority')} = g.p AND c.{q('queue_key')} IS NULL",
            f"c.{q('priority')} > g.p",
        )
    )
    + " LIMIT 1"
)


def _oldest(key: str) -> str:
    """The first ``wanted`` steps of group ``g`` (its key matched by ``key``) that may be admitted now.

    Waiting, or admitted with the admission's lease lapsed (its worker never
    started it), with no retry pending, of an active run; by arrival.
    """
    return (
        f"(SELECT c.{q('id')} AS id, c.{q('run_id')} AS run_id, c.{q('seq')} AS seq, c.{q('queue_key')} AS k, "
        f"c.{q('priority')} AS priority, c.{q('enqueued_at')} AS enqueued_at FROM {CP_TABLE} c, {RUN_TABLE} r "
        f"WHERE {_BACKLOG} AND c.{q('priority')} = g.p AND {key} AND {_ACTIVE_RUN} "
        f"AND (c.{q('admission')} = '{Admission.WAITING}' OR (c.{q('admission')} = '{Admission.ADMITTED}' "
        f"AND c.{q('wake_at')} <= %(now)s)) AND (c.{q('retry_at')} IS NULL OR c.{q('retry_at')} <= %(now)s) "
        # In the index's order: a NULL key is no equality to the planner, so naming the fixed
        # columns is what lets it read the range in order instead of sorting the group.
        f"ORDER BY c.{q('priority')}, c.{q('queue_key')}, c.{q('enqueued_at')}, c.{q('id')} "
        f"LIMIT (SELECT wanted FROM room)::integer)"
    )


def _last_served(key: str) -> str:
    """When the key that ``key`` matches was last admitted in the queue (an index probe, newest first)."""
    return (
        f"SELECT c.{q('admitted_at')} FROM {CP_TABLE} c WHERE c.{q('queue')} = %(queue)s AND {key} "
        # The index's own order, backwards, and its condition (a key) spelled out.
        f"AND c.{q('admitted_at')} IS NOT NULL AND c.{q('queue_key')} IS NOT NULL "
        f"ORDER BY c.{q('queue')} DESC, c.{q('queue_key')} DESC, c.{q('admitted_at')} DESC LIMIT 1"
    )


# The concurrency in force as the locked row says (an override wins; JSON null turns it off);
# a stored value that is not a number leaves it to the store's own check (``wanted`` differs).
_CONCURRENCY = (
    f"CASE WHEN NOT lk.{q('overrides')} ? 'concurrency' THEN %(concurrency)s::integer "
    f"WHEN jsonb_typeof(lk.{q('overrides')} -> 'concurrency') = 'number' "
    f"THEN (lk.{q('overrides')} ->> 'concurrency')::numeric::integer END"
)

_NAMED = re.compile(r"%\((\w+)\)s")


def _leaving(mine: str) -> list[str]:
    """The CTEs of a step result's short read: ``leave``, ``ahead`` and ``short``.

    While at least the leave threshold (a quarter of the concurrency in force,
    at least ``LEAVE_SLOT_MIN``) of the queue's slots are granted to steps no
    worker has started, the result leaves its slot (``QueueSeen.leaves_slot``)
    whatever else the read would find, so the read stops at that many such
    steps instead of counting every holder and reading the backlog. The steps
    counted are those the full read counts as unstarted (admitted, pending, in
    their admission lease, of an active run, not the result's own: ``mine``),
    among the first threshold's worth of admitted, pending steps in their
    lease: so the count reaches the threshold only when that many are
    unstarted, and may fall short of it (the result then reads in full) while
    steps of a run that ended hold places among them.
    A queue without a concurrency limit, or a paused one, never reads short.
    """
    return [
        # leave_threshold's arithmetic, on the concurrency in force as the row says.
        f"leave AS (SELECT GREATEST(%(leave_min)s::integer, (({_CONCURRENCY}) + %(leave_share)s::integer - 1) "
        f"/ %(leave_share)s::integer) AS n FROM lk "
        f"WHERE NOT lk.{q('paused')} AND ({_CONCURRENCY}) IS NOT NULL)",
        # The first threshold's worth of such steps, then each of their runs looked up once: the
        # steps granted together are mostly one run's, and a lookup per step was most of the
        # statement's work. A step of a run that is over still takes a place among the first
        # (the count then falls short, and the result reads in full: never a slot left wrongly).
        f"ahead AS (SELECT COALESCE(sum(x.k), 0)::bigint AS u FROM (SELECT g.run_id, count(*) AS k FROM "
        f"(SELECT c.{q('run_id')} AS run_id FROM {CP_TABLE} c "
        f"WHERE {_IN_QUEUE} AND c.{q('admission')} = '{Admission.ADMITTED}' "
        f"AND c.{q('status')} = '{CheckpointStatus.PENDING}' AND c.{q('wake_at')} > %(now)s {mine}"
        f"AND EXISTS (SELECT 1 FROM leave) LIMIT (SELECT n FROM leave)) g GROUP BY g.run_id) x "
        f"WHERE EXISTS (SELECT 1 FROM {RUN_TABLE} r WHERE {_active_run('x.run_id')}))",
        "short AS (SELECT COALESCE((SELECT u FROM ahead) >= (SELECT n FROM leave), false) AS s)",
    ]


# The candidates of an admission read (after its ``lk`` and ``room``): the CTEs grp and cands.
_CANDIDATES = (
    # Each (priority, key) of the backlog, one probe of its index per group (a loose scan).
    # Read only when the queue may admit: a paused or full queue costs no read of its backlog.
    f"grp AS ((SELECT c.{q('priority')} AS p, c.{q('queue_key')} AS k FROM {CP_TABLE} c WHERE {_BACKLOG} "
    f"AND EXISTS (SELECT 1 FROM lk WHERE NOT {q('paused')}) AND (SELECT wanted FROM room) > 0 "
    f"ORDER BY c.{q('priority')}, c.{q('queue_key')} LIMIT 1) "
    f"UNION ALL SELECT n.p, n.k FROM grp g CROSS JOIN LATERAL ({_NEXT_GROUP}) n)",
    # Each group's first ``wanted`` steps ready to admit, by arrival: one range of the index each.
    f"cands AS (SELECT x.* FROM grp g CROSS JOIN LATERAL (SELECT s.*, row_number() OVER "
    f"(ORDER BY s.enqueued_at, s.id) AS rank FROM ({_oldest('c.' + q('queue_key') + ' = g.k')} UNION ALL "
    f"{_oldest('g.k IS NULL AND c.' + q('queue_key') + ' IS NULL')}) s) x)",
)


def positional(sql: str) -> tuple[str, list[str]]:
    """``sql`` with its named parameters made positional, and the names in the order to pass them."""
    names: list[str] = []

    def one(match: re.Match[str]) -> str:
        names.append(match.group(1))
        return "%s"

    return _NAMED.sub(one, sql), names


def _result_parts(result: bool) -> tuple[str, str, str, str]:
    """For a step result's read: its own step left out, and the short read's conditions; else none.

    A short read (:func:`_leaving`) reads no holder, has no room (so no
    candidate), and reports the unstarted steps it counted.
    """
    unstarted = "(SELECT COALESCE(sum(u), 0) FROM holders)"
    if not result:
        return "", "", "", unstarted
    return (
        f"AND (c.{q('run_id')}, c.{q('seq')}) <> (%(run_id)s::text, %(seq)s::integer) ",
        "AND NOT (SELECT s FROM short) ",
        " * (CASE WHEN (SELECT s FROM short) THEN 0 ELSE 1 END)",
        f"CASE WHEN (SELECT s FROM short) THEN (SELECT u FROM ahead) ELSE {unstarted} END",
    )


def admit_read(locked: bool, result: bool = True) -> tuple[str, str]:
    """The read of an admission: its CTEs (``lk`` first) and the SELECT of its rows (named parameters).

    Params: queue, now, batch, concurrency (the
    settings', or NULL); unlocked, also run_id and seq: the step whose result
    the same statement writes, not counted as a holder (the statement's
    snapshot still sees it hold). ``locked``: the queue row ``FOR UPDATE``
    (an admission); else ``FOR SHARE`` (a step result's read, which writes
    nothing here), or, not ``result``, no lock and no step of its own (an
    admission's first, optimistic read: its grants compare-and-set on the
    version it saw, so it need not wait for anyone). One row per candidate (or one with NULL
    candidate columns when there is none): the row's paused, overrides,
    rate_next_at; fresh (see the module docstring); the row's version as the
    statement's snapshot saw it (grants chosen from this read compare-and-set
    on it: a newer row, one whose grants the snapshot missed, refuses them); the row's
    version; the slots held by key as a JSON array of [key, count]; wanted
    (the grants the concurrency leaves room for); unstarted (slots held by steps
    granted but not yet claimed by a worker); then the candidate's id,
    run_id, seq, key, priority, enqueued_at, rank, served. A step result's
    read may be short (:func:`_leaving`): no holder, ``wanted`` 0, no
    candidate, and ``unstarted`` at the leave threshold.
    """
    lock = " FOR UPDATE" if locked else " FOR SHARE" if result else ""
    ctes = [
        f"lk AS (SELECT {q('paused')}, {q('overrides')}, {q('rate_next_at')}, {q('unkeyed_served_at')}, xmin AS v "
        f"FROM {QUEUE_TABLE} WHERE {q('name')} = %(queue)s{lock})",
        f"snap AS (SELECT xmin AS v FROM {QUEUE_TABLE} WHERE {q('name')} = %(queue)s)",
    ]
    mine, full, none, unstarted = _result_parts(result and not locked)
    if mine:
        ctes += _leaving(mine)
    ctes += [
        # Counted per (key, run), then each run looked up once: a queue's holders are mostly the
        # steps of a few runs, and a lookup per holder was most of the read's work.
        f"holders AS (SELECT h.k, sum(h.n)::bigint AS n, sum(h.u)::bigint AS u FROM "
        f"(SELECT c.{q('queue_key')} AS k, c.{q('run_id')} AS run_id, count(*) AS n, "
        f"count(*) FILTER (WHERE c.{q('status')} = '{CheckpointStatus.PENDING}') AS u FROM {CP_TABLE} c "
        f"WHERE {_IN_QUEUE} AND c.{q('admission')} = '{Admission.ADMITTED}' AND c.{q('status')} IN {_OPEN} "
        f"AND c.{q('wake_at')} > %(now)s {mine}{full}GROUP BY c.{q('queue_key')}, c.{q('run_id')}) h "
        f"WHERE EXISTS (SELECT 1 FROM {RUN_TABLE} r WHERE {_active_run('h.run_id')}) GROUP BY h.k)",
        f"room AS (SELECT GREATEST(LEAST(%(batch)s::integer, COALESCE(({_CONCURRENCY}) "
        f"- (SELECT COALESCE(sum(n), 0) FROM holders), %(batch)s::integer)), 0){none} AS wanted FROM lk)",
        *_CANDIDATES,
        # When each candidate's key was last admitted, needed only to take turns between keys:
        # one probe per key of the served index (its newest admission), not the queue's history;
        # for the steps without a key, the queue row says.
        f"served AS (SELECT d.k, CASE WHEN d.k IS NULL THEN (SELECT {q('unkeyed_served_at')} FROM lk) "
        f"ELSE ({_last_served(q('queue_key') + ' = d.k')}) END AS at FROM (SELECT DISTINCT k FROM cands) d "
        f"WHERE (SELECT count(*) FROM (SELECT DISTINCT k FROM cands) n) > 1)",
    ]
    select = (
        # The queue's columns repeat on every candidate's row: its JSON as text, decoded once (to_seen).
        f"SELECT lk.{q('paused')}, lk.{q('overrides')}::text, lk.{q('rate_next_at')}, "
        f"lk.v = (SELECT v FROM snap) AS fresh, "
        f"(SELECT v FROM snap)::text AS version, "
        f"(SELECT COALESCE(json_agg(json_build_array(k, n)), '[]') FROM holders)::text AS held, "
        f"(SELECT wanted FROM room) AS wanted, {unstarted} AS unstarted, "
        f"cands.id, cands.run_id, cands.seq, cands.k, cands.priority, "
        f"cands.enqueued_at, cands.rank, served.at "
        f"FROM lk LEFT JOIN cands ON true LEFT JOIN served ON served.k IS NOT DISTINCT FROM cands.k"
    )
    return ", ".join(ctes), select


def count_read() -> tuple[str, str]:
    """A step result's read of a busy queue: its short read alone (:func:`_leaving`), the backlog unread.

    For a queue whose results leave their slots (its workers are behind):
    only the unstarted steps are counted, up to the leave threshold, with the
    queue row's paused and overrides; nothing is locked (whether a result
    leaves its slot depends on no version of the row). A statement that
    carries it is planned and run as a plain result is, plus those probes,
    where the full read (:func:`admit_read`) costs its whole plan on every
    result; locking nothing, it is read before the result locks its run's
    row (:data:`RESULT_COUNT_FIRST`), so that row, for which the run's other
    results queue, is not held while it counts. Params: queue, leave_min,
    leave_share, concurrency, now, run_id, seq. One row: paused, overrides, and the unstarted steps counted (0
    when too few to leave the slot: ``QueueSeen.leaves_slot`` then says no).
    """
    mine = f"AND (c.{q('run_id')}, c.{q('seq')}) <> (%(run_id)s::text, %(seq)s::integer) "
    ctes = [
        f"lk AS (SELECT {q('paused')}, {q('overrides')} FROM {QUEUE_TABLE} WHERE {q('name')} = %(queue)s)",
        *_leaving(mine),
    ]
    select = (
        f"SELECT lk.{q('paused')}, lk.{q('overrides')}::text, "
        f"CASE WHEN (SELECT s FROM short) THEN (SELECT u FROM ahead) ELSE 0 END FROM lk"
    )
    return ", ".join(ctes), select


_READ_CTES, _READ_SELECT = admit_read(locked=True)
_RESULT_CTES, RESULT_READ_SELECT = admit_read(locked=False)
# The read that rides in a step result's statement (see :func:`admit_read`), positional.
RESULT_READ_CTES, RESULT_READ_PARAMS = positional(_RESULT_CTES)
_COUNT_CTES, RESULT_COUNT_SELECT = count_read()
# A busy queue's result reads only its short read (see :func:`count_read`), positional.
RESULT_COUNT_CTES, RESULT_COUNT_PARAMS = positional(_COUNT_CTES)
# Its decision, read before the result locks its run row (it locks nothing, see count_read).
RESULT_COUNT_FIRST = "short"
# The same count on its own: whether an admission that lost its race may leave its slots.
PG_COUNT_READ, PG_COUNT_READ_PARAMS = positional(f"WITH {_COUNT_CTES} {RESULT_COUNT_SELECT}")
# The read of an admission under the queue row's lock (see :func:`admit_read`).
PG_ADMIT_READ, PG_ADMIT_READ_PARAMS = positional(f"WITH RECURSIVE {_READ_CTES} {_READ_SELECT}")
# An admission's first read, taking no lock (see :func:`admit_read`).
PG_ADMIT_PEEK, PG_ADMIT_PEEK_PARAMS = positional("WITH RECURSIVE {} {}".format(*admit_read(False, result=False)))

# Every grant of one admission, and the queue row rewritten (its new version tells a
# concurrent read that it missed these grants); compare-and-set on pending (a step that
# left pending meanwhile is not granted). With a version, also compare-and-set on the
# queue row's: nothing is written unless the row is still the one the grants were chosen
# from (locked here, so no admission commits in between). The row's admission counts take
# the grants written (QueueTally.add, the same arithmetic), and its unkeyed_served_at the latest
# start granted to a step without a key (the round robin's time for them). Params: queue, version, version,
# ids, starts and untils (each as statements.column_params gives it: grants of one
# admission mostly share both), minute (the admission's now, truncated), rate_next_at, queue.
# Returns whether the row matched, and the ids granted.
_NEWER = f"{q('admitted_minute')} >= (SELECT b FROM m)"
PG_ADMIT_GRANT = (
    f"WITH lk AS (SELECT 1 FROM {QUEUE_TABLE} WHERE {q('name')} = %s "
    f"AND (%s::text IS NULL OR xmin::text = %s::text) FOR UPDATE), "
    f"g AS (UPDATE {CP_TABLE} c SET {q('admission')} = '{Admission.ADMITTED}', "
    f"{q('admitted_at')} = v.s, {q('wake_at')} = v.u "
    f"FROM unnest(%s::bigint[], {spread('%s::timestamptz')}, {spread('%s::timestamptz')}) AS v(i, s, u) "
    f"WHERE c.{q('id')} = v.i AND c.{q('status')} = '{CheckpointStatus.PENDING}' AND EXISTS (SELECT 1 FROM lk) "
    f"RETURNING c.{q('id')}, c.{q('queue_key')} AS k, c.{q('admitted_at')} AS s), "
    "m AS (SELECT %s::timestamptz AS b), "
    f"t AS (UPDATE {QUEUE_TABLE} SET {q('rate_next_at')} = %s::timestamptz, "
    # Every right-hand side reads the row as it was (SQL's UPDATE), as QueueTally.add does.
    f"{q('admitted_prior')} = CASE WHEN {_NEWER} THEN {q('admitted_prior')} "
    f"WHEN {q('admitted_minute')} = (SELECT b FROM m) - interval '1 minute' THEN {q('admitted_count')} ELSE 0 END, "
    f"{q('admitted_count')} = CASE WHEN {_NEWER} THEN {q('admitted_count')} ELSE 0 END + (SELECT count(*) FROM g), "
    f"{q('admitted_minute')} = GREATEST({q('admitted_minute')}, (SELECT b FROM m)), "
    f"{q('unkeyed_served_at')} = GREATEST({q('unkeyed_served_at')}, (SELECT max(s) FROM g WHERE k IS NULL)) "
    f"WHERE {q('name')} = %s AND EXISTS (SELECT 1 FROM lk)) "
    f"SELECT EXISTS (SELECT 1 FROM lk), ARRAY(SELECT {q('id')} FROM g)"
)
