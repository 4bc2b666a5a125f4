"""Owner ids: who holds a lease, and whether that holder is provably dead.

Every lease (a turn's on its run, a step's execution lease) names its holder
in ``locked_by``: the owner id of one process, ``host:pid:suffix`` followed,
where the operating system lets us say which process it is, by
``:start.place`` (the process's start time in clock ticks since boot, and a
digest of the boot id and the PID namespace). A forked child makes its own.

:func:`is_dead` decides whether such a holder is dead *for certain*, from the
owner id alone. That lets a worker starting on the same host release at once
what its killed predecessor held (:mod:`durable.worker.predecessors`)
instead of waiting for the leases to lapse.

Invariant: ``is_dead(owner)`` is True only if the process that made ``owner``
can no longer run. It requires the same host name, the same kernel boot and
the same PID namespace as the caller (so the caller sees the same process
table), and then that the pid is gone, a zombie, or now a process started at
another time (the pid was reused). A pid and a start time identify one
process per boot and namespace; a namespace's identity is reused only after
every process in it has gone. Owner ids without the ``start.place`` part
(no ``/proc``; ids written by earlier versions) are never judged dead.
"""

from __future__ import annotations

import hashlib
import os
import socket
import uuid

_HOST_CHARS = 40


def host() -> str:
    """This machine's name as owner ids carry it."""
    return socket.gethostname()[:_HOST_CHARS]


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _start_ticks(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks since boot) of process ``pid``, from ``/proc``; None if there is none."""
    stat = _read(f"/proc/{pid}/stat")
    if not stat:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after its last ")".
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None


def _place() -> str | None:
    """A digest of this kernel boot and this PID namespace; None where ``/proc`` does not tell them."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return None
    if not boot:
        return None
    return hashlib.sha256(f"{boot.strip()}|{namespace}".encode()).hexdigest()[:12]


def make_owner_id() -> str:
    """Identity of this process in ``locked_by`` columns: host, pid, a random suffix and, on Linux, start.place."""
    pid = os.getpid()
    base = f"{host()}:{pid}:{uuid.uuid4().hex[:8]}"
    place, started = _place(), _start_ticks(pid)
    if place is None or started is None:
        return base
    return f"{base}:{started[1]}.{place}"


def host_prefix() -> str:
    """The start every owner id made on this host shares (``host:``)."""
    return f"{host()}:"


def is_dead(owner: str) -> bool:
    """True only if the process that made ``owner`` provably cannot run any more (see the module's invariant)."""
    parts = owner.split(":")
    if len(parts) != 4 or parts[0] != host():
        return False
    start, _, place = parts[3].partition(".")
    if not place or place != _place() or not parts[1].isdigit() or not start.isdigit():
        return False
    return not _same_process(int(parts[1]), int(start))


def _same_process(pid: int, start: int) -> bool:
    """Whether ``pid`` is a live (not zombie) process that started at ``start``."""
    seen = _start_ticks(pid)
    if seen is None:
        return False
    state, started = seen
    return started == start and state not in ("Z", "X", "x")
