"""The claim of a page of due runs: one statement that picks and leases them (every store's, by vendor).

Split from :mod:`durable.store.statements` (which holds the other named
statements); the texts are built once, at import.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from durable.engine.vocab import RunStatus
from durable.store.statements import RUN_TABLE, q, run_columns


def _claim_page(pending: bool, postgres: bool, scoped: int = 0) -> str:
    """A page of due runs leased at once (params: see :func:`claim_page_params`).

    ``scoped``: the page is chosen among the runs of that many namespaces (a
    scoped worker's; on PostgreSQL one array parameter, whatever the number).
    """
    status, wake_at, run_id = q("status"), q("wake_at"), q("id")
    if pending:
        due, order = f"{status} = %s", f"{q('priority')} DESC, {q('created_at')}"
    else:
        due, order = f"{status} = %s AND {wake_at} <= %s", wake_at
    chosen = due
    if scoped:
        # A namespace never changes: the page's choice is enough, the locked row needs no recheck.
        among = "= ANY(%s)" if postgres else f"IN ({', '.join(['%s'] * scoped)})"
        chosen = f"{due} AND {q('namespace')} {among}"
    if postgres:
        # The claimed rows are found by primary key, and the recheck is written so that no
        # index can serve it: with an index path on the due columns, a plan made without
        # statistics (a new table, a generic plan) rescans every due run for each picked one.
        # The store plans these claims at every call, on the index alone (see
        # ``Cursors.by_index``).
        recheck = f"COALESCE({status}, '') = %s" + ("" if pending else f" AND COALESCE({wake_at}, 'infinity') <= %s")
        picked = f"WHERE {run_id} = ANY(ARRAY(SELECT {q('claim_id')} FROM {q('picked')})) AND {recheck}"
    else:
        picked = f"FROM {q('picked')} WHERE {RUN_TABLE}.{run_id} = {q('picked')}.{q('claim_id')} AND {due}"
    # The page is chosen once, in a materialised CTE: as a subquery (``id IN (SELECT ...)``)
    # PostgreSQL may rescan it for every candidate row, and with SKIP LOCKED each rescan
    # would lock another page.
    return (
        f"WITH {q('picked')} ({q('claim_id')}) AS MATERIALIZED ("
        f"SELECT {run_id} FROM {RUN_TABLE} WHERE {chosen} ORDER BY {order} LIMIT %s"
        f"{' FOR UPDATE SKIP LOCKED' if postgres else ''}) "
        f"UPDATE {RUN_TABLE} SET {status} = %s, {q('locked_by')} = %s, {q('locked_until')} = %s, "
        f"{q('updated_at')} = %s, {q('started_at')} = COALESCE({q('started_at')}, %s), "
        f"{q('turns')} = {q('turns')} + 1 "
        # Re-checked on the row as locked: only a run still due is taken.
        f"{picked} RETURNING {run_columns()}"
    )


CLAIM_PENDING_PAGE = _claim_page(pending=True, postgres=False)
CLAIM_DUE_PAGE = _claim_page(pending=False, postgres=False)


def claim_page_params(
    due: list[Any], limit: int, owner: str, now: Any, lease_until: Any, scope: Sequence[Any] = ()
) -> list[Any]:
    """The parameters of a claim page; ``scope``: its namespace parameters (see :func:`_claim_page`)."""
    return [*due, *scope, limit, RunStatus.RUNNING, owner, lease_until, now, now, *due]


def claim_page_sql(pending: bool, scoped: int) -> str:
    """The portable claim page among the runs of ``scoped`` namespaces (0: every namespace)."""
    if not scoped:
        return CLAIM_PENDING_PAGE if pending else CLAIM_DUE_PAGE
    return _claim_page(pending=pending, postgres=False, scoped=scoped)


# PostgreSQL's.
PG_CLAIM_PENDING_PAGE = _claim_page(pending=True, postgres=True)
PG_CLAIM_DUE_PAGE = _claim_page(pending=False, postgres=True)
# The same among the runs of the namespaces given as one array parameter (a scoped worker's).
PG_CLAIM_PENDING_PAGE_SCOPED = _claim_page(pending=True, postgres=True, scoped=1)
PG_CLAIM_DUE_PAGE_SCOPED = _claim_page(pending=False, postgres=True, scoped=1)
