"""The workflow of the namespace routing test (tests/integration/test_namespaces.py).

Each execution of its step appends one line (``kind="tenant"``, the namespace
the workflow passed, the process's pid) to the suite's execution log, so the
test counts exactly which process ran which namespace's steps; the run's
output names the process that ran its final turn.
"""

from __future__ import annotations

import os

import durable
from tests.integration.workflows import record


@durable.step(name="tenant.work")
def tenant_work(namespace: str, n: int) -> int:
    info = durable.current_step()
    assert info is not None, "dispatched in this suite"
    record(kind="tenant", ns=namespace, run=info.run_id, seq=info.seq)
    return os.getpid()


@durable.workflow(name="it.tenant")
def tenant_flow(ctx: durable.WorkflowContext, n: int) -> dict[str, int]:
    first = ctx.step(tenant_work, ctx.namespace, n)
    second = ctx.step(tenant_work, ctx.namespace, n + 1)
    return {"first": first, "second": second, "turn": os.getpid()}
