"""Store contract: worker descriptors (advertise, refresh, retire, list, prune)."""

from __future__ import annotations

from typing import Any

from tests.store.conftest import at


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
