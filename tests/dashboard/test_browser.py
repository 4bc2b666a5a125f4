"""Browser test: an operator logs into the admin, filters runs, opens a timeline, requeues and cancels.

Drives Debian's ``chromium`` (installed by ``.ci/run``) through Playwright;
nothing is downloaded at run time. Screenshots go to ``test-output/``.
"""

from __future__ import annotations

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import User

import durable
from durable.models import Run
from durable.testing import run_until_settled
from tests.dashboard import browser

OUTPUT = browser.OUTPUT


def test_operator_filters_inspects_requeues_and_cancels(transactional_db, live_server, browser_page):
    User.objects.create_superuser("ops", "ops@example.com", "ops-password")
    failed = durable.start("dash_fail", {"n": 1}, run_id="browser-failed")
    run_until_settled(failed)
    waiting = durable.start("dash_wait", {"n": 2}, run_id="browser-waiting")
    run_until_settled(waiting)
    durable.start("dash_sleep", run_id="browser-sleeping")
    assert Run.objects.get(id=failed).status == "failed"

    page = browser_page
    OUTPUT.mkdir(exist_ok=True)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/durable/run/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "ops-password")
    page.click("input[type=submit]")

    # the run list, then filtered by status
    page.wait_for_selector("#result_list")
    assert page.locator("#result_list tbody tr").count() == 3
    page.click("details[data-filter-title='status'] a:text-is('Failed')")
    page.wait_for_url("**status=failed**")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 1 and "browser-failed" in rows.first.inner_text()
    # and by the typed-in tag filter: dash_wait's runs carry the tag "dash"
    page.goto(f"{live_server.url}/admin/durable/run/")
    page.fill("details[data-filter-title='tag'] input[name=tag]", "dash")
    page.press("details[data-filter-title='tag'] input[name=tag]", "Enter")
    page.wait_for_url("**tag=dash**")
    assert page.locator("#result_list tbody tr").count() == 1
    assert "browser-waiting" in page.locator("#result_list tbody").inner_text()

    # the failed run's timeline
    page.goto(f"{live_server.url}/admin/durable/run/?status=failed")
    page.click("#result_list a:has-text('browser-failed')")
    page.wait_for_selector("#durable-timeline")
    assert page.locator("#durable-timeline .durable-tl-row").count() >= 1
    assert page.locator("#durable-timeline .durable-seg").count() >= 1
    assert "card declined" in page.locator("#durable-error").inner_text()
    page.screenshot(path=str(OUTPUT / "dashboard-run-timeline.png"), full_page=True)

    # requeue it
    page.click("button[data-action='requeue']")
    page.wait_for_selector(".messagelist .success")
    assert "Requeue: done for 1 run(s)" in page.locator(".messagelist").inner_text()
    assert Run.objects.get(id=failed).status == "pending"

    # cancel the waiting run
    page.goto(f"{live_server.url}/admin/durable/run/{quote(waiting)}/change/")
    assert "signal" in page.locator("#durable-waiting").inner_text()
    page.click("a[data-action='cancel']")
    page.click("#durable-confirm")
    page.wait_for_selector(".messagelist .success")
    assert "Cancel: done for 1 run(s)" in page.locator(".messagelist").inner_text()
    assert Run.objects.get(id=waiting).status == "cancelled"

    # the summary page with its charts
    page.goto(f"{live_server.url}/admin/durable/run/summary/")
    page.wait_for_selector("svg.durable-chart rect", state="attached")
    page.screenshot(path=str(OUTPUT / "dashboard-summary.png"), full_page=True)
    page.goto(f"{live_server.url}/admin/durable/run/")
    page.screenshot(path=str(OUTPUT / "dashboard-run-list.png"), full_page=True)
    assert (OUTPUT / "dashboard-run-timeline.png").stat().st_size > 10_000


@pytest.mark.parametrize(("width", "name"), [(1400, "desktop"), (390, "phone")])
def test_operator_sees_pauses_and_triggers_schedules(transactional_db, live_server, browser_page, width, name):
    from tests import schedule_workflows  # noqa: F401  (registers sched.window)

    User.objects.create_superuser("ops", "ops@example.com", "ops-password")
    durable.create_schedule("nightly-report", "sched.window", cron="0 2 * * *", timezone="Europe/Lisbon")
    durable.create_schedule("quarter-hour", "sched.window", every="15m", overlap="skip")
    last = durable.trigger_schedule("nightly-report")
    run_until_settled(last)

    page = browser_page
    page.set_viewport_size({"width": width, "height": 900})
    OUTPUT.mkdir(exist_ok=True)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/durable/schedule/")
    page.fill("#id_username", "ops")
    page.fill("#id_password", "ops-password")
    page.click("input[type=submit]")
    page.wait_for_selector("#result_list")
    table = page.locator("#result_list").inner_text()
    assert "every day at 02:00 (Europe/Lisbon)" in table and "every 15 minutes" in table
    assert last in table and "completed" in table
    assert page.locator("#result_list tbody tr").first.locator("time").count() == 5
    page.screenshot(path=str(OUTPUT / f"dashboard-schedules-{name}.png"), full_page=True)
    if width >= 1024:  # on a desktop every column, the backfill link last, fits beside the side panels
        box = page.locator("#changelist .results").bounding_box()
        for col in ("paused", "tools"):
            th = page.locator(f"#result_list th.column-{col}").bounding_box()
            assert th["x"] + th["width"] <= box["x"] + box["width"], (col, th, box)

    # pause one through the admin action
    page.check("#result_list input[name=_selected_action][value='quarter-hour']")
    page.select_option("select[name=action]", "pause_selected")
    page.click("button[name=index]")
    page.wait_for_selector(".messagelist .success")
    assert "Pause quarter-hour: paused" in page.locator(".messagelist").inner_text()
    assert durable.get_schedule("quarter-hour").paused
    assert (OUTPUT / f"dashboard-schedules-{name}.png").stat().st_size > 10_000
