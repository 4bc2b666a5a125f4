"""Store contract: worker descriptors (advertise, refresh, retire, list, prune)."""

from __future__ import annotations

from typing import Any

from durable.engine.plan_steps import LEASE_ENDED_BEFORE
from durable.engine.ports import LeasesExpired
from tests.store.conftest import at, running, step, suspended

DEAD = "host-a:11:aaaa:100.place"
LIVE = "host-a:12:bbbb:200.place"


def _descriptor(worker_id: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": worker_id,
        "hostname": "host",
        "pid": 42,
        "queues": ["default"],
        "steps": ["work"],
        "workflows": ["wf"],
        "capabilities": {"eager": True},
        "protocol": 1,
        "started_at": at(0),
        **extra,
    }


def test_workers_advertise_refresh_and_expire(store: Any) -> None:
    store.advertise(_descriptor("w1"), at(1), at(31))
    store.advertise(_descriptor("w2", pid=43), at(1), at(11))
    live = store.live_workers(at(20))
    assert live == [{**_descriptor("w1"), "heartbeat_at": at(1), "expires_at": at(31)}]
    assert store.refresh_worker("w2", at(20), at(50)) is True
    assert sorted(w["id"] for w in store.live_workers(at(40))) == ["w2"]
    assert store.refresh_worker("gone", at(20), at(50)) is False


def test_advertising_again_replaces_the_descriptor(store: Any) -> None:
    store.advertise(_descriptor("w1"), at(1), at(31))
    store.advertise(_descriptor("w1", queues=["q2"]), at(5), at(35))
    (worker,) = store.live_workers(at(6))
    assert (worker["queues"], worker["heartbeat_at"], worker["expires_at"]) == (["q2"], at(5), at(35))


def test_retire_and_prune_remove_descriptors(store: Any) -> None:
    store.advertise(_descriptor("w1"), at(1), at(31))
    store.advertise(_descriptor("w2"), at(1), at(31))
    store.retire_worker("w1")
    assert [w["id"] for w in store.live_workers(at(2))] == ["w2"]
    assert store.prune_workers(at(31 + 3600)) == 0
    assert store.prune_workers(at(32 + 3600)) == 1
    assert store.live_workers(at(2)) == []


def test_lease_holders_are_the_owners_of_running_runs_and_steps_with_a_prefix(store: Any) -> None:
    running(store, "r1", owner=DEAD)
    running(store, "r2", owner="host-b:2:cccc")
    suspended(store, "r3", step(1), step(2), step(3))
    store.claim_step("r3", 1, LIVE, at(1), at(60))
    store.claim_step("r3", 2, DEAD, at(1), at(60))
    assert store.lease_holders("host-a:", 10) == [DEAD, LIVE]
    assert store.lease_holders("host-b:", 10) == ["host-b:2:cccc"]
    assert len(store.lease_holders("host-a:", 1)) == 1
    assert store.lease_holders("host-c:", 10) == []


def test_expire_leases_ends_now_every_lease_one_owner_holds(store: Any) -> None:
    running(store, "r1", owner=DEAD)  # its lease runs until at(30)
    running(store, "r2", owner=LIVE)
    suspended(store, "r3", step(1), step(2))
    store.claim_step("r3", 1, DEAD, at(1), at(60))
    store.claim_step("r3", 2, LIVE, at(1), at(60))
    assert store.orphans(at(6), 10) == [] and store.expired_steps(at(6), 10) == []

    assert store.expire_leases(DEAD, at(5)) == LeasesExpired(runs=1, steps=1)
    r1, r2 = store.get_run("r1"), store.get_run("r2")
    assert (r1.status, r1.locked_by, r1.locked_until) == ("running", DEAD, at(5) - LEASE_ENDED_BEFORE)
    assert (r2.locked_by, r2.locked_until) == (LIVE, at(30))
    cps = store.load_checkpoints("r3")
    assert [(cps[s].status, cps[s].locked_by, cps[s].wake_at) for s in (1, 2)] == [
        ("running", DEAD, at(5) - LEASE_ENDED_BEFORE),
        ("running", LIVE, at(60)),
    ]
    # The sweeps recover them at their next pass (even at the same clock reading), by their own rules.
    assert store.orphans(at(5), 10) == ["r1"]
    assert [row["seq"] for row in store.expired_steps(at(5), 10)] == [1]
    assert store.expire_leases(DEAD, at(5)) == LeasesExpired(runs=0, steps=0)


def test_expire_leases_leaves_a_lease_taken_over_meanwhile(store: Any) -> None:
    running(store, "r1", owner=DEAD)
    store.expire_leases(DEAD, at(5))
    assert store.recover_orphan("r1", LIVE, at(6), at(36), 5) is not None
    assert store.expire_leases(DEAD, at(7)) == LeasesExpired(runs=0, steps=0)
    assert store.get_run("r1").locked_until == at(36)
