"""The admin's confirmation pages, starting a run, the workers page, downloads, and the run list's new columns."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.test import override_settings
from django.urls import reverse

import durable
from durable.models import Checkpoint, Run, RunStatus, WorkerDescriptor
from durable.testing import fake_clock, run_until_settled
from durable_dashboard.models import AuditEntry

LIST = reverse("admin:durable_run_changelist")
START = reverse("admin:durable_run_start")
WORKERS = reverse("admin:durable_run_workers")


def detail(run_id: str) -> str:
    return reverse("admin:durable_run_change", args=[quote(run_id)])


def act(run_id: str, action: str) -> str:
    return reverse("admin:durable_run_act", args=[quote(run_id), action])


# -- confirmation with a reason -----------------------------------------------------------------


@pytest.mark.parametrize("action", ["cancel", "cancel_compensate"])
def test_cancel_links_to_a_confirmation_page_that_changes_nothing(admin_client, make_run, action):
    run_id = make_run("waiting")
    page = admin_client.get(detail(run_id)).content.decode()
    assert f'href="{act(run_id, action)}"' in page  # a link to the confirmation, not a one-click form
    confirm = admin_client.get(act(run_id, action))
    assert confirm.status_code == 200
    html = confirm.content.decode()
    assert 'name="reason"' in html and 'id="durable-confirm"' in html and run_id in html
    assert Run.objects.get(id=run_id).status == RunStatus.SUSPENDED
    assert not AuditEntry.objects.exists()


def test_confirmed_cancel_stores_the_reason_and_shows_it_on_the_run(admin_client, admin_user, make_run):
    run_id = make_run("waiting")
    admin_client.post(act(run_id, "cancel"), {"reason": "duplicate order, customer called"})
    assert Run.objects.get(id=run_id).status == RunStatus.CANCELLED
    entry = AuditEntry.objects.get()
    assert (entry.user, entry.action, entry.reason) == (admin_user, "cancel", "duplicate order, customer called")
    page = admin_client.get(detail(run_id)).content.decode()
    audit = page[page.index('id="durable-audit"') :]
    assert "duplicate order, customer called" in audit and "cancel" in audit


def test_non_destructive_actions_take_no_get(admin_client, make_run):
    assert admin_client.get(act(make_run("failed"), "requeue")).status_code == 405


def test_bulk_actions_confirm_first_with_a_reason(admin_client, make_run):
    runs = [make_run("waiting") for _ in range(2)]
    page = admin_client.post(LIST, {"action": "cancel_selected", "_selected_action": runs})
    assert page.status_code == 200 and b'name="reason"' in page.content
    assert Run.objects.filter(status=RunStatus.CANCELLED).count() == 0
    admin_client.post(LIST, {"action": "cancel_selected", "_selected_action": runs, "apply": "1", "reason": "drill"})
    assert Run.objects.filter(status=RunStatus.CANCELLED).count() == 2
    assert AuditEntry.objects.get().reason == "drill"


def test_signal_form_is_prefilled_with_the_awaited_signal(admin_client, make_run):
    run_id = make_run("waiting")
    page = admin_client.get(detail(run_id)).content.decode()
    form = page[page.index(f'action="{act(run_id, "signal")}"') :]
    assert 'name="name" value="go"' in form[: form.index("</form>")]


# -- start a run ----------------------------------------------------------------------------------


def test_start_a_run_from_the_admin(admin_client, admin_user):
    page = admin_client.get(START)
    assert page.status_code == 200 and b'<option value="dash_order">' in page.content
    response = admin_client.post(
        START, {"workflow": "dash_order", "input": '{"id": 7}', "run_id": "adm-1", "tags": "a, b", "namespace": ""}
    )
    assert response.status_code == 302 and response["Location"] == detail("adm-1")
    run = Run.objects.get(id="adm-1")
    assert (run.input, run.tags, run.version) == ({"id": 7}, ["a", "b"], 2)
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.via, entry.user) == ("start", "admin", admin_user)


@pytest.mark.parametrize(
    ("data", "field", "message"),
    [
        ({"workflow": "dash_order", "input": '{"no": "id"}'}, "input", "an order needs an id"),
        ({"workflow": "dash_order", "input": "{nope"}, "input", "Enter a valid JSON"),
        ({"workflow": "nobody", "input": ""}, "workflow", "Select a valid choice"),
        ({"workflow": "dash_wait", "input": "", "run_id": "has space"}, "run_id", "without spaces"),
    ],
)
def test_start_shows_errors_in_the_form(admin_client, data, field, message):
    response = admin_client.post(START, data)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors and message in " ".join(errors[field])
    assert not Run.objects.exists()


def test_start_of_a_singleton_whose_queue_is_full_shows_the_error_on_the_form(admin_client):
    data = {"workflow": "dash_import", "input": '{"account": "acme"}', "run_id": "imp-1"}
    assert admin_client.post(START, data).status_code == 302
    response = admin_client.post(START, {**data, "run_id": "imp-2"})
    assert response.status_code == 200
    errors = " ".join(response.context["form"].non_field_errors())
    assert "singleton key 'acme'" in errors and "try again later" in errors
    assert "try again later" in response.content.decode()
    assert list(Run.objects.values_list("id", flat=True)) == ["imp-1"]


def test_a_queued_run_shows_the_key_it_waits_for_and_filters_by_its_status(admin_client):
    durable.start("dash_serial", {"account": "acme"}, run_id="ser-1")
    durable.start("dash_serial", {"account": "acme"}, run_id="ser-2")
    page = admin_client.get(detail("ser-2"))
    assert page.status_code == 200
    assert [(w["kind"], w["what"]) for w in page.context["waiting_on"]] == [
        ("singleton key", "acme (at most 1 at a time, queue position 2)")
    ]
    assert 'class="durable-badge durable-queued"' in page.content.decode()
    listed = admin_client.get(LIST, {"status": "queued"})
    assert [run.id for run in listed.context["cl"].result_list] == ["ser-2"]


def test_start_needs_its_permission(client, make_user):
    client.force_login(make_user("viewer-only"))
    assert client.get(START).status_code == 403
    assert client.post(START, {"workflow": "dash_wait"}).status_code == 403
    assert not Run.objects.exists()


# -- download -------------------------------------------------------------------------------------


def test_download_a_run_as_json(admin_client, make_run):
    run_id = make_run("failed")
    response = admin_client.get(reverse("admin:durable_run_download", args=[quote(run_id)]))
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    assert response["Content-Disposition"].startswith('attachment; filename="run-')
    data = json.loads(response.content)
    assert (data["id"], data["status"], data["input"]) == (run_id, "failed", {"n": 1})
    assert data["error"]["code"] == "step_failed"
    assert [(h["name"], h["status"]) for h in data["history"]] == [("charge", "failed")]
    inline = admin_client.get(reverse("admin:durable_run_download", args=[quote(run_id)]) + "?inline=1")
    assert "Content-Disposition" not in inline


def test_download_is_scoped(client, make_user, make_run):
    theirs = make_run("failed", namespace="team-b")
    client.force_login(make_user("scoped-viewer", namespaces=("team-a",)))
    assert client.get(reverse("admin:durable_run_download", args=[quote(theirs)])).status_code == 404


# -- workers --------------------------------------------------------------------------------------


def test_workers_page_lists_workers_and_queues(admin_client, make_run):
    with fake_clock() as clock:
        WorkerDescriptor.objects.create(
            id="w-1",
            hostname="box",
            pid=42,
            queues=["emails"],
            steps=["dash.add"],
            workflows=["dash_step:1"],
            capabilities={"gpu": True, "subscriptions": {}},
            protocol=3,
            heartbeat_at=clock.now(),
            expires_at=clock.now() + timedelta(minutes=1),
        )
        make_run("step")  # one dispatched step pending
        clock.advance("90s")
        WorkerDescriptor.objects.filter(id="w-1").update(expires_at=clock.now() + timedelta(minutes=1))
        page = admin_client.get(WORKERS)
    html = page.content.decode()
    assert page.status_code == 200
    assert "box:42" in html and "emails" in html and "gpu" in html and "protocol 3" in html
    assert "1m 30s ago" in html
    queues = page.context["queues"]
    assert [(q["pending"], q["running"]) for q in queues] == [(1, 0)]
    assert queues[0]["oldest"] == timedelta(seconds=90)


def test_workers_page_without_workers(admin_client):
    assert b"No live worker" in admin_client.get(WORKERS).content


# -- run list and detail ---------------------------------------------------------------------------


def test_list_has_error_column_truncated_ids_and_live_mode(admin_client, make_run):
    long_id = "order-" + "x" * 60
    make_run("failed", run_id=long_id)
    page = admin_client.get(LIST).content.decode()
    assert f'title="{long_id}"' in page and long_id[:23] + "…" in page
    assert "<code>step_failed</code>" in page
    assert "data-durable-live" not in page  # nothing active
    make_run("waiting")
    with override_settings(DURABLE_DASHBOARD={"LIVE_INTERVAL": 2}):
        assert 'data-durable-live="2"' in admin_client.get(LIST).content.decode()
        with_filter = admin_client.get(LIST + "?status=failed").content.decode()
    assert "data-durable-live" not in with_filter


def test_detail_page_times_waits_and_reconcile_fallback(admin_client, make_run):
    waiting = make_run("waiting")
    html = admin_client.get(detail(waiting)).content.decode()
    assert "reconcile fallback" in html and "durable-wake-reconcile" in html
    assert "durable-seg-await" in html  # the signal wait, not drawn as running
    assert " UTC" in html
    sleeping = make_run("sleeping")
    assert "durable-wake-timer" in admin_client.get(detail(sleeping)).content.decode()


def test_history_json_cells_are_collapsed(admin_client):
    run_id = durable.start("dash_step", 1)
    run_until_settled(run_id)
    Checkpoint.objects.filter(run_id=run_id).update(output={"rows": ["x" * 50] * 200})
    html = admin_client.get(detail(run_id)).content.decode()
    history = html[html.index("durable-checkpoints") :]
    assert '<details class="durable-collapse"><summary><code>{&quot;rows&quot;' in history


def test_live_detail_marks_active_runs_only(admin_client, make_run):
    assert "data-durable-live" in admin_client.get(detail(make_run("waiting"))).content.decode()
    assert "data-durable-live" not in admin_client.get(detail(make_run("completed"))).content.decode()


# -- charts and date filters ------------------------------------------------------------------------


def test_summary_chart_has_axes_and_labels(admin_client, make_run):
    make_run("failed")
    page = admin_client.get(reverse("admin:durable_run_summary"))
    chart = page.context["chart"]
    assert [value for _, value in chart["yticks"]] == [0, 1]
    html = page.content.decode()
    assert 'text-anchor="end" dominant-baseline="middle">1</text>' in html
    assert ">runs</text>" in html and "hour (UTC)" in html


def test_created_filter_takes_a_time_of_day(admin_client, make_run):
    from datetime import UTC, datetime

    with fake_clock(datetime(2026, 5, 1, 10, 0, tzinfo=UTC)) as clock:
        make_run("failed", run_id="at-10")
        clock.advance("2h")
        make_run("failed", run_id="at-12")
    page = admin_client.get(LIST + "?created_at__gte=2026-05-01T11:00&created_at__lt=2026-05-01T13:00:00")
    assert {r.id for r in page.context["cl"].result_list} == {"at-12"}
    html = page.content.decode()
    assert 'type="datetime-local"' in html and 'value="2026-05-01T11:00"' in html and "Times in UTC." in html
    day_only = admin_client.get(LIST + "?created_at__gte=2026-05-01").content.decode()
    assert 'value="2026-05-01T00:00"' in day_only


def test_error_code_filter(admin_client, make_run):
    failed = make_run("failed")
    make_run("completed")
    make_run("waiting")
    page = admin_client.get(LIST + "?error_code=step_failed")
    assert {r.id for r in page.context["cl"].result_list} == {failed}
    assert not admin_client.get(LIST + "?error_code=declined").context["cl"].result_list
