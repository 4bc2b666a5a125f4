"""At start-up, release what this host's dead lease holders held: a killed predecessor's leases.

A worker killed outright (``kill -9``, the OOM killer, a crash) leaves its
turns' run leases and its steps' execution leases to run out, up to ``LEASE``
and ``STEP_EXECUTION_LEASE`` later. When a worker starts on the same host
(most often the same worker, restarted by its supervisor) it can tell from
the holders' owner ids that they were processes of this host that no longer
run (:func:`durable.engine.owners.is_dead`), and end those leases at once; the
sweeps then recover the runs and steps at their next pass.
"""

from __future__ import annotations

import logging

from durable.engine import owners
from durable.engine.core import Engine

logger = logging.getLogger("durable.worker")


def release_dead_holders(engine: Engine) -> dict[str, int]:
    """End now every lease held by a process of this host that provably no longer runs.

    Invariant: a lease is ended only when its holder is dead for certain: its
    owner id names this host, this kernel boot and this PID namespace, and a
    process id that is gone, a zombie or reused by a process started at another
    time. A live worker's lease is never touched, whatever it is called and
    whoever runs this; holder ids that cannot be verified (no ``/proc``, ids of
    earlier versions, other hosts) are left to lapse. Ending a lease only makes
    it run out early (compare-and-set on its holder): the orphan and lapsed-step
    sweeps then recover the work by their own rules, so racing another starting
    worker or a sweeper recovers each piece of work once.

    Returns how many dead holders were found and how many run and step leases
    were ended.
    """
    counts = {"holders": 0, "runs": 0, "steps": 0}
    store = engine.store
    for owner in store.lease_holders(owners.host_prefix(), engine.settings.sweep_batch):
        if owner == engine.owner or not owners.is_dead(owner):
            continue
        ended = store.expire_leases(owner, engine.clock.now())
        counts["holders"] += 1
        counts["runs"] += ended.runs
        counts["steps"] += ended.steps
        logger.warning(
            "released the leases of dead process %s of this host: %d run(s), %d step(s)", owner, ended.runs, ended.steps
        )
    return counts
