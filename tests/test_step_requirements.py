"""Step requirements in one process: routes, blocking without a capable worker, execution only where capable."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest

import durable
from durable import runtime
from durable.engine.requirements import capabilities_of, required_by, route_for, serves
from durable.fleet import descriptor
from durable.runtime import get_engine, registry
from durable.testing import drive, fake_clock, run_until_settled

pytestmark = pytest.mark.django_db

ran: Counter[str] = Counter()


@durable.step(name="req.render", requires=["gpu"])
def req_render(page: int) -> str:
    ran["req.render"] += 1
    return f"rendered {page}"


@durable.step(name="req.plain")
def req_plain(page: int) -> int:
    ran["req.plain"] += 1
    return page


@durable.workflow(name="req.flow")
def req_flow(ctx: durable.WorkflowContext, page: int) -> dict[str, object]:
    return {"plain": ctx.step(req_plain, page), "render": ctx.step(req_render, page)}


@pytest.fixture(autouse=True)
def _clean():
    ran.clear()
    yield
    runtime.serve_capabilities(frozenset())


def advertise_worker(tags: list[str], worker_id: str = "gpu-box") -> None:
    engine = get_engine()
    now = engine.clock.now()
    engine.store.advertise(descriptor(worker_id, [], {"tags": tags}, registry=registry), now, now + timedelta(hours=1))


def test_a_steps_requirements_are_part_of_its_route():
    assert registry.get_step("req.render").route == "req@gpu"  # its name's prefix is its queue
    assert route_for(None, ("gpu",)) == "durable@gpu"
    assert route_for("render", ("gpu", "pdf")) == "render@gpu+pdf"
    assert route_for(None, ()) is None and route_for("render", ()) == "render"
    assert required_by("render@gpu+pdf") == {"gpu", "pdf"} and required_by("render") == frozenset()
    assert serves(frozenset({"gpu", "pdf", "x"}), "render@gpu+pdf") and not serves(frozenset({"gpu"}), "r@gpu+pdf")
    assert capabilities_of(["durable", "render@gpu+pdf", "ocr@cpu"]) == {"gpu", "pdf", "cpu"}


def test_bad_requirements_are_refused_at_registration():
    with pytest.raises(durable.ConfigurationError, match="list of capability names"):
        durable.step(name="req.bad1", requires="gpu")(lambda: None)
    with pytest.raises(durable.ConfigurationError, match="capability 'G P U' is invalid"):
        durable.step(name="req.bad2", requires=["G P U"])(lambda: None)


def test_with_no_live_worker_that_has_the_capability_the_run_is_blocked_naming_it():
    with fake_clock():
        run = run_until_settled(durable.start(req_flow, 1))
    assert run.status == "blocked"
    assert run.error["code"] == "no_capable_worker" and run.error["requires"] == ["gpu"]
    assert "no live worker with capability gpu serves step 'req.render'" in run.error["message"]
    assert ran == Counter({"req.plain": 1})


def test_a_process_without_the_capability_leaves_the_step_to_a_worker_that_has_it():
    advertise_worker(["gpu"])  # a capable worker is alive elsewhere
    with fake_clock():
        run_id = durable.start(req_flow, 2)
        run = run_until_settled(run_id)
        assert run.status == "suspended"  # the step is pending for the capable worker
        assert ran == Counter({"req.plain": 1})
        runtime.serve_capabilities(frozenset({"gpu", "other"}))  # now this process is that worker
        run = run_until_settled(run_id)
    assert run.status == "completed", run.error
    assert run.output == {"plain": 2, "render": "rendered 2"}
    assert ran == Counter({"req.plain": 1, "req.render": 1})


def test_a_blocked_run_resumes_once_a_capable_worker_appears():
    with fake_clock() as clock:
        run_id = durable.start(req_flow, 3)
        assert run_until_settled(run_id).status == "blocked"
        runtime.serve_capabilities(frozenset({"gpu"}))
        advertise_worker(["gpu"])
        clock.advance("10s")  # past the fleet answer's cache
        drive()
        run = run_until_settled(run_id)
    assert run.status == "completed", run.error
    assert ran["req.render"] == 1


def test_a_worker_with_other_capabilities_does_not_count():
    advertise_worker(["pdf"])
    with fake_clock():
        run = run_until_settled(durable.start(req_flow, 4))
    assert run.status == "blocked" and ran["req.render"] == 0
