"""Browser tests of the operator's admin at 1,400 px and 390 px (Debian's chromium through Playwright).

Each scenario saves a screenshot to ``test-output/operator-<scenario>-<width>.png``; the docs'
"Operating runs" page shows some of them.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User

import durable
from durable.models import Checkpoint, Run, RunStatus, WorkerDescriptor
from durable.runtime import now
from durable.testing import run_until_settled
from durable_dashboard.models import AuditEntry
from tests.dashboard import browser

WIDTHS = [pytest.param(browser.DESKTOP, id="1400"), pytest.param(browser.PHONE, id="390")]


@pytest.fixture
def ops(transactional_db):
    return User.objects.create_superuser("ops", "ops@example.com", "ops-password")


def _login(page, live_server, next_path: str = "/admin/durable/run/") -> None:
    page.goto(f"{live_server.url}/admin/login/?next={next_path}")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "ops-password")
    page.click("input[type=submit]")
    page.wait_for_load_state()


def _shot(page, name: str, viewport: dict[str, int]) -> Path:
    path = browser.OUTPUT / f"operator-{name}-{viewport['width']}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 5_000
    return path


def _no_horizontal_scroll(page) -> None:
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.evaluate("window.innerWidth"), f"the page is {width}px wide"


def _detail(live_server, run_id: str) -> str:
    return f"{live_server.url}/admin/durable/run/{quote(run_id)}/change/"


@pytest.mark.parametrize("viewport", WIDTHS)
def test_cancel_with_a_reason_is_confirmed_and_audited(ops, live_server, chromium, viewport):
    run_id = durable.start("dash_wait", {"n": 1}, run_id="b-cancel")
    run_until_settled(run_id)
    page = browser.new_page(chromium, viewport)
    _login(page, live_server, f"/admin/durable/run/{quote(run_id)}/change/")
    page.click("a[data-action='cancel']")
    page.wait_for_selector("#durable-confirm-form")
    assert Run.objects.get(id=run_id).status == RunStatus.SUSPENDED  # the page alone changes nothing
    page.fill("#id_reason", "customer called: duplicate order")
    _shot(page, "cancel-confirm", viewport)
    page.click("#durable-confirm")
    page.wait_for_selector(".messagelist .success")
    assert Run.objects.get(id=run_id).status == RunStatus.CANCELLED
    assert "customer called: duplicate order" in page.locator("#durable-audit").inner_text()
    _no_horizontal_scroll(page)
    page.goto(f"{live_server.url}/admin/durable_dashboard/auditentry/")
    assert "customer called: duplicate order" in page.locator("#result_list").inner_text()
    assert AuditEntry.objects.get().reason == "customer called: duplicate order"
    _shot(page, "audit-log", viewport)


@pytest.mark.parametrize("viewport", WIDTHS)
def test_the_list_refreshes_itself_when_a_run_completes(ops, live_server, chromium, viewport, settings):
    settings.DURABLE_DASHBOARD = {"LIVE_INTERVAL": 0.5}
    failed = durable.start("dash_fail", {"n": 1}, run_id="order-2026-12-01-customer-4711-with-a-long-id")
    run_until_settled(failed)
    run_id = durable.start("dash_fail", {"ok": True}, run_id="b-live")  # pending until driven
    page = browser.new_page(chromium, viewport)
    _login(page, live_server)
    row = page.locator("#result_list tbody tr", has_text="b-live")
    assert row.locator(".durable-badge").inner_text() == "pending"
    page.evaluate("window.durableMarker = 'same page'")
    run_until_settled(run_id)
    page.wait_for_selector("#result_list .durable-badge.durable-completed")
    assert page.evaluate("window.durableMarker") == "same page"  # no reload by hand
    failed_row = page.locator("#result_list tbody tr", has_text="order-2026-12-01")
    assert "step_failed" in failed_row.inner_text() and failed_row.locator(".durable-badge").is_visible()
    assert failed_row.locator(f".durable-id[title='{failed}']").count() == 1  # the whole id on hover
    badge = failed_row.locator(".durable-badge").bounding_box()
    assert badge["x"] + badge["width"] <= viewport["width"]  # the status on screen without scrolling sideways
    if viewport["width"] >= 1024:  # on a desktop the long id and error leave created and duration on screen
        box = page.locator("#changelist .results").bounding_box()
        for col in ("created_col", "duration_col"):
            th = page.locator(f"#result_list th.column-{col}").bounding_box()
            assert th["x"] + th["width"] <= box["x"] + box["width"], (col, th, box)
    assert page.locator("#durable-results[data-durable-live]").count() == 0  # nothing active: it stops
    page.locator("#result_list tbody input.action-select").first.check()
    page.wait_for_selector(".action-counter:has-text('1 of 2 selected')")  # selection still works after it
    _shot(page, "run-list", viewport)


@pytest.mark.parametrize("viewport", WIDTHS)
def test_start_a_run_from_the_admin(ops, live_server, chromium, viewport):
    page = browser.new_page(chromium, viewport)
    _login(page, live_server)
    page.click("a.durable-start-link")
    page.select_option("#id_workflow", "dash_order")
    page.fill("#id_input", '{"customer": 7}')
    page.click("#durable-start")
    page.wait_for_selector(".errorlist")
    assert "an order needs an id" in page.locator(".errorlist").inner_text()
    assert not Run.objects.exists()
    _shot(page, "start-error", viewport)
    page.fill("#id_input", '{"id": 7}')
    page.fill("#id_run_id", f"b-start-{viewport['width']}")
    page.fill("#id_tags", "from-admin")
    page.click("#durable-start")
    page.wait_for_selector("#durable-run-page")
    run = Run.objects.get(id=f"b-start-{viewport['width']}")
    assert (run.input, run.tags) == ({"id": 7}, ["from-admin"])
    _no_horizontal_scroll(page)


@pytest.mark.parametrize("viewport", WIDTHS)
def test_the_workers_page(ops, live_server, chromium, viewport):
    WorkerDescriptor.objects.create(
        id="host-a:101:abc",
        hostname="host-a",
        pid=101,
        queues=["durable", "emails"],
        steps=["dash.add"],
        workflows=["dash_step:1"],
        capabilities={"gpu": True},
        protocol=2,
        heartbeat_at=now(),
        expires_at=now() + timedelta(minutes=5),
    )
    durable.start("dash_step", 1, run_id="b-step")
    from durable.runtime import get_engine

    get_engine().run_turn("b-step")  # its step stays pending: no worker runs it here
    page = browser.new_page(chromium, viewport)
    _login(page, live_server)
    page.click("a.durable-workers-link")
    page.wait_for_selector("#durable-worker-list")
    workers = page.locator("#durable-worker-list").inner_text()
    assert "host-a:101" in workers and "emails" in workers and "gpu" in workers
    queues = page.locator("#durable-queues tr").nth(1).inner_text()
    assert queues.split()[1:3] == ["1", "0"]
    _shot(page, "workers", viewport)


@pytest.mark.parametrize("viewport", WIDTHS)
def test_download_a_run(ops, live_server, chromium, viewport):
    run_id = durable.start("dash_fail", {"n": 3}, run_id="b-download")
    run_until_settled(run_id)
    page = browser.new_page(chromium, viewport, accept_downloads=True)
    _login(page, live_server, f"/admin/durable/run/{quote(run_id)}/change/")
    with page.expect_download() as info:
        page.click("#durable-download")
    download = info.value
    assert download.suggested_filename == "run-b-download.json"
    data = json.loads(Path(download.path()).read_text())
    assert (data["id"], data["status"], data["input"]) == ("b-download", "failed", {"n": 3})
    assert [h["name"] for h in data["history"]] == ["charge"]
    _shot(page, "run-detail-failed", viewport)
    _no_horizontal_scroll(page)


@pytest.mark.parametrize("viewport", WIDTHS)
def test_history_with_a_large_json_output(ops, live_server, chromium, viewport):
    run_id = durable.start("dash_step", 1, run_id="b-large")
    run_until_settled(run_id)
    large = {"rows": [{"id": i, "sku": f"SKU-{i:05d}", "note": "a fairly long note " * 4} for i in range(300)]}
    Checkpoint.objects.filter(run_id=run_id).update(output=large)
    page = browser.new_page(chromium, viewport)
    _login(page, live_server, f"/admin/durable/run/{quote(run_id)}/change/")
    cell = page.locator(".durable-checkpoints details.durable-collapse").first
    summary = cell.locator("summary")
    assert summary.bounding_box()["height"] < 40  # one line while collapsed, not a column of letters
    assert not cell.locator("pre").is_visible()
    _no_horizontal_scroll(page)
    summary.click()
    pre = cell.locator("pre")
    assert pre.is_visible() and '"sku": "SKU-00299"' in pre.inner_text()
    assert pre.bounding_box()["width"] > 150  # readable lines, not wrapped letter by letter
    _no_horizontal_scroll(page)
    _shot(page, "history-large-json", viewport)
