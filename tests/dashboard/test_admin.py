"""The admin: run list and filters, detail, summary, actions with their permissions, audit log."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.test import override_settings
from django.urls import reverse

import durable
from durable.models import Run
from durable_dashboard import operations
from durable_dashboard.models import AuditEntry, NamespaceGrant
from durable_dashboard.paginator import EstimatedCountPaginator

pytestmark = pytest.mark.django_db

LIST = "/admin/durable/run/"


def detail(run_id: str) -> str:
    return reverse("admin:durable_run_change", args=[quote(run_id)])


def act(run_id: str, action: str) -> str:
    return reverse("admin:durable_run_act", args=[quote(run_id), action])


# -- list ----------------------------------------------------------------------------------


def test_run_list_shows_badges_and_summary_link(admin_client, make_run):
    make_run("failed", run_id="f1")
    make_run("waiting", run_id="w1")
    page = admin_client.get(LIST)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'class="durable-badge durable-failed"' in html and "durable-suspended" in html
    assert reverse("admin:durable_run_summary") in html
    for action in ("requeue_selected", "cancel_selected", "signal_selected", "retry_selected", "redispatch_selected"):
        assert f'value="{action}"' in html


@pytest.mark.parametrize(
    "query,expected",
    [
        ("", {"f1", "w1", "c1", "t1"}),
        ("?status=failed", {"f1"}),
        ("?workflow=dash_wait", {"w1", "t1"}),
        ("?namespace=team-a", {"t1"}),
        ("?version=1", {"f1", "w1", "c1", "t1"}),
        ("?tag=vip", {"c1"}),
        ("?created_at__gte=2000-01-01", {"f1", "w1", "c1", "t1"}),
        ("?created_at__lt=2000-01-01", set()),
        ("?updated_at__gte=2000-01-01T00:00:00&status=suspended", {"w1", "t1"}),
        ("?q=c1", {"c1"}),
        ("?q=vip", {"c1"}),
        ("?q=dash_wait", {"w1", "t1"}),
    ],
)
def test_run_list_filters_and_search(admin_client, make_run, query, expected):
    make_run("failed", run_id="f1")
    make_run("waiting", run_id="w1")
    make_run("completed", run_id="c1", tags=["vip"])
    make_run("waiting", run_id="t1", namespace="team-a")
    page = admin_client.get(LIST + query)
    assert page.status_code == 200
    shown = {run.id for run in page.context["cl"].result_list}
    assert shown == expected


def test_run_list_filters_stale_runs(admin_client, make_run):
    from durable import runtime
    from durable.models import Run

    make_run("waiting", run_id="ok1")
    make_run("waiting", run_id="stuck1")
    Run.objects.filter(id="stuck1").update(
        status="running", locked_by="gone", locked_until=runtime.now() - timedelta(hours=1)
    )
    page = admin_client.get(LIST + "?stale=running_past_lease")
    assert page.status_code == 200
    assert {run.id for run in page.context["cl"].result_list} == {"stuck1"}
    assert "suspended past wake" in admin_client.get(LIST).content.decode()


@pytest.mark.parametrize("query", ["?version=abc", "?created_at__gte=yesterday", "?status=nope", "?bogus=1"])
def test_run_list_bad_filter_is_not_a_500(admin_client, query):
    page = admin_client.get(LIST + query)
    assert page.status_code in (200, 302)


def test_run_list_viewer_has_no_actions(staff_client, viewer, make_run):
    make_run("failed")
    html = staff_client(viewer).get(LIST).content.decode()
    assert "requeue_selected" not in html and "cancel_selected" not in html


def test_run_list_offers_only_permitted_actions(staff_client, make_user, make_run):
    make_run("failed")
    user = make_user("requeuer", "requeue")
    html = staff_client(user).get(LIST).content.decode()
    assert 'value="requeue_selected"' in html and 'value="cancel_selected"' not in html


def test_paginator_never_counts_past_the_bound(make_run):
    for i in range(5):
        make_run("pending", run_id=f"p{i}")
    with override_settings(DURABLE_DASHBOARD={"COUNT_LIMIT": 3}):
        paginator = EstimatedCountPaginator(Run.objects.filter(status="pending").order_by("-created_at"), 2)
        assert paginator.count == 3 and paginator.is_capped
        assert [r.id for r in paginator.page(1).object_list] == ["p4", "p3"]
    paginator = EstimatedCountPaginator(Run.objects.filter(status="pending").order_by("-created_at"), 2)
    assert paginator.count == 5 and not paginator.is_capped


def test_run_list_is_paginated_with_capped_count(admin_client, make_run):
    for i in range(6):
        make_run("pending", run_id=f"p{i}")
    with override_settings(DURABLE_DASHBOARD={"COUNT_LIMIT": 3}):
        page = admin_client.get(LIST + "?status=pending")
        assert page.status_code == 200
        assert "Counts are capped" in page.content.decode()


# -- detail --------------------------------------------------------------------------------


def test_detail_of_a_waiting_run(admin_client, make_run):
    run_id = make_run("waiting")
    durable.signal(run_id, "later", {"early": 1})
    page = admin_client.get(detail(run_id))
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="durable-timeline"' in html and "durable-seg-run" in html
    assert "#2 go" in html  # the signal wait in the timeline
    waiting = page.context["waiting_on"]
    assert [(w["kind"], w["what"]) for w in waiting] == [("signal", "go")]
    assert [name for name, _sig, _ in page.context["buffered_signals"]] == ["later"]
    assert "&quot;n&quot;: 1" in html  # pretty input


def test_detail_of_a_failed_run_has_error_and_traceback(admin_client, make_run):
    page = admin_client.get(detail(make_run("failed")))
    html = page.content.decode()
    assert 'id="durable-error"' in html and "card declined" in html and "Traceback" in html


def test_detail_shows_timers_steps_and_queue_wait(admin_client, make_run):
    sleeping = admin_client.get(detail(make_run("sleeping")))
    assert [w["kind"] for w in sleeping.context["waiting_on"]] == ["timer"]
    assert "durable-seg-timer" in sleeping.content.decode()
    step = admin_client.get(detail(make_run("step")))
    assert [w["kind"] for w in step.context["waiting_on"]] == ["step"]
    assert "durable-seg-wait" in step.content.decode()


def test_detail_shows_lineage(admin_client, make_run):
    failed = make_run("failed")
    new_id = durable.retry_with_input(failed, {"ok": True})
    origin = admin_client.get(detail(failed))
    assert [r.id for r in origin.context["retries"]] == [new_id]
    retry = admin_client.get(detail(new_id))
    assert retry.context["retry_of"].id == failed


def test_detail_of_unknown_run_is_404(admin_client):
    assert admin_client.get(detail("missing")).status_code == 404


def test_detail_with_odd_run_id(admin_client, make_run):
    run_id = make_run("waiting", run_id="odd/id_with:chars?")
    page = admin_client.get(detail(run_id))
    assert page.status_code == 200 and page.context["run"].id == run_id


def test_detail_for_viewer_has_no_action_buttons(staff_client, viewer, make_run):
    page = staff_client(viewer).get(detail(make_run("failed")))
    assert page.status_code == 200 and page.context["actions"] == []
    assert 'id="durable-actions"' not in page.content.decode()


def test_runs_cannot_be_added_changed_or_deleted(admin_client, make_run):
    run_id = make_run("failed")
    assert admin_client.get("/admin/durable/run/add/").status_code == 403
    assert admin_client.post(f"/admin/durable/run/{quote(run_id)}/delete/").status_code in (403, 302)
    assert Run.objects.filter(id=run_id).exists()


# -- actions -------------------------------------------------------------------------------


def test_requeue_from_detail(admin_client, admin_user, make_run):
    run_id = make_run("failed")
    response = admin_client.post(act(run_id, "requeue"), follow=True)
    assert response.status_code == 200
    assert Run.objects.get(id=run_id).status == "pending"
    assert any("Requeue: done for 1 run(s)" in str(m) for m in response.context["messages"])
    entry = AuditEntry.objects.get()
    assert (entry.user, entry.via, entry.action, entry.run_ids, entry.ok) == (
        admin_user,
        "admin",
        "requeue",
        [run_id],
        True,
    )


def test_action_failure_is_reported(admin_client, make_run):
    run_id = make_run("waiting")
    response = admin_client.post(act(run_id, "requeue"), follow=True)
    assert any("failed for 1 run(s)" in str(m) for m in response.context["messages"])
    assert AuditEntry.objects.get().ok is False


def test_cancel_redispatch_and_signal_from_detail(admin_client, make_run):
    waiting = make_run("waiting")
    admin_client.post(act(waiting, "signal"), {"name": "go", "payload": '{"v": 1}'})
    from durable.testing import run_until_settled

    assert run_until_settled(waiting).output == {"v": 1}
    step = make_run("step")
    response = admin_client.post(act(step, "redispatch"), follow=True)
    assert any("redispatched 1 pending step" in str(m) for m in response.context["messages"])
    admin_client.post(act(step, "cancel"), {"reason": ""})
    assert Run.objects.get(id=step).status == "cancelled"


def test_signal_form_validation(admin_client, make_run):
    run_id = make_run("waiting")
    response = admin_client.post(act(run_id, "signal"), {"name": "go", "payload": "{not json"}, follow=True)
    assert any("payload" in str(m) for m in response.context["messages"])
    assert not AuditEntry.objects.exists()
    assert Run.objects.get(id=run_id).waiters.count() == 1


def test_retry_with_edited_input_redirects_to_new_run(admin_client, make_run):
    run_id = make_run("failed")
    page = admin_client.get(detail(run_id))
    assert "&quot;n&quot;: 1" in page.content.decode()  # the form starts from the original input
    response = admin_client.post(act(run_id, "retry"), {"input": '{"ok": true}'})
    new = Run.objects.get(retry_of=run_id)
    assert response.status_code == 302 and response["Location"] == detail(new.id)
    assert new.input == {"ok": True}


def test_cancel_with_undo_and_republish_from_detail(admin_client, make_run):
    run_id = make_run("waiting")
    response = admin_client.post(act(run_id, "cancel_compensate"), follow=True)
    assert any("Cancel with undo (compensate): done" in str(m) for m in response.context["messages"])
    from durable.testing import run_until_settled

    assert run_until_settled(run_id).status == "cancelled"
    source = make_run("source")
    response = admin_client.post(act(source, "republish"), follow=True)
    assert any("dash_listener" in str(m) for m in response.context["messages"])


@pytest.mark.parametrize(
    "action", ["requeue", "redispatch", "cancel", "cancel_compensate", "retry", "signal", "republish"]
)
def test_detail_action_needs_its_permission(staff_client, make_user, make_run, action):
    others = [a for a in operations.LABELS if a != action]
    user = make_user("almost", *others)
    run_id = make_run("failed")
    assert staff_client(user).post(act(run_id, action), {"name": "go", "input": "1"}).status_code == 403
    assert Run.objects.get(id=run_id).status == "failed"
    assert not AuditEntry.objects.exists()


def test_act_needs_post_and_a_known_action(admin_client, make_run):
    run_id = make_run("failed")
    assert admin_client.get(act(run_id, "requeue")).status_code == 405
    assert admin_client.post(act(run_id, "explode")).status_code == 404
    assert admin_client.post(act("missing", "requeue")).status_code == 404


def test_bulk_requeue_and_cancel(admin_client, make_run):
    failed = [make_run("failed") for _ in range(2)]
    waiting = make_run("waiting")
    response = admin_client.post(
        LIST, {"action": "requeue_selected", "_selected_action": [*failed, waiting], "apply": "1"}, follow=True
    )
    messages = [str(m) for m in response.context["messages"]]
    assert any("done for 2 run(s)" in m for m in messages) and any("failed for 1 run(s)" in m for m in messages)
    assert Run.objects.filter(id__in=failed, status="pending").count() == 2
    admin_client.post(LIST, {"action": "cancel_selected", "_selected_action": [waiting], "apply": "1"})
    assert Run.objects.get(id=waiting).status == "cancelled"
    assert set(AuditEntry.objects.values_list("action", flat=True)) == {"requeue", "cancel"}


def test_bulk_signal_asks_for_parameters_first(admin_client, make_run):
    runs = [make_run("waiting") for _ in range(2)]
    form = admin_client.post(LIST, {"action": "signal_selected", "_selected_action": runs})
    assert form.status_code == 200 and b'name="payload"' in form.content
    assert not AuditEntry.objects.exists()
    bad = admin_client.post(LIST, {"action": "signal_selected", "_selected_action": runs, "apply": "1", "name": ""})
    assert bad.status_code == 200 and not AuditEntry.objects.exists()
    done = admin_client.post(
        LIST,
        {"action": "signal_selected", "_selected_action": runs, "apply": "1", "name": "go", "payload": "7"},
        follow=True,
    )
    assert any("done for 2 run(s)" in str(m) for m in done.context["messages"])
    assert AuditEntry.objects.get().params == {"name": "go", "payload": 7}


def test_bulk_retry_form(admin_client, make_run):
    failed = make_run("failed")
    admin_client.post(LIST, {"action": "retry_selected", "_selected_action": [failed], "apply": "1", "input": "{}"})
    assert Run.objects.filter(retry_of=failed).exists()


def test_bulk_action_without_permission_is_refused(staff_client, viewer, make_run):
    run_id = make_run("failed")
    response = staff_client(viewer).post(LIST, {"action": "requeue_selected", "_selected_action": [run_id]})
    assert response.status_code in (200, 302, 403)
    assert Run.objects.get(id=run_id).status == "failed"
    assert not AuditEntry.objects.exists()


def test_bulk_is_bounded(admin_client, make_run):
    runs = [make_run("failed") for _ in range(3)]
    with override_settings(DURABLE_DASHBOARD={"BULK_LIMIT": 2}):
        response = admin_client.post(
            LIST, {"action": "requeue_selected", "_selected_action": runs, "apply": "1"}, follow=True
        )
    assert any("Only the newest 2" in str(m) for m in response.context["messages"])
    assert Run.objects.filter(status="pending").count() == 2


# -- namespaces in the admin ---------------------------------------------------------------


def test_admin_namespace_scoping(staff_client, scoped, make_run):
    mine = make_run("failed", namespace="team-a")
    theirs = make_run("failed", namespace="team-b")
    client = staff_client(scoped)
    shown = {r.id for r in client.get(LIST).context["cl"].result_list}
    assert shown == {mine}
    assert client.get(detail(theirs)).status_code == 404
    assert client.post(act(theirs, "requeue")).status_code == 404
    client.post(LIST, {"action": "requeue_selected", "_selected_action": [mine, theirs], "apply": "1"})
    assert Run.objects.get(id=theirs).status == "failed" and Run.objects.get(id=mine).status == "pending"
    assert AuditEntry.objects.get().run_ids == [mine]


# -- summary -------------------------------------------------------------------------------


@pytest.mark.parametrize("window", ["24h", "7d", "30d", "bogus"])
def test_summary_page(admin_client, make_run, window):
    make_run("failed")
    make_run("completed")
    make_run("waiting")
    page = admin_client.get(reverse("admin:durable_run_summary") + f"?window={window}")
    assert page.status_code == 200
    data = page.context["data"]
    assert data["totals"] == {"started": 3, "completed": 1, "failed": 1}
    counts = {status: n for status, _, n in data["by_status"]}
    assert counts["failed"] == 1 and counts["suspended"] == 1 and counts["completed"] == 1
    assert dict(data["by_workflow"])["dash_fail"]["total"] == 2
    assert b"<svg" in page.content and b"<rect" in page.content


def test_summary_needs_view_permission(staff_client, make_user):
    assert staff_client(make_user("nobody", view=False)).get(reverse("admin:durable_run_summary")).status_code == 403


def test_summary_is_scoped(staff_client, scoped, make_run):
    make_run("failed", namespace="team-a")
    make_run("failed", namespace="team-b")
    page = staff_client(scoped).get(reverse("admin:durable_run_summary"))
    assert page.context["data"]["totals"]["started"] == 1


# -- audit log and grants ------------------------------------------------------------------


def test_audit_log_is_read_only_and_visible(admin_client, make_run):
    run_id = make_run("failed")
    admin_client.post(act(run_id, "requeue"))
    entry = AuditEntry.objects.get()
    assert admin_client.get("/admin/durable_dashboard/auditentry/").status_code == 200
    page = admin_client.get(f"/admin/durable_dashboard/auditentry/{entry.pk}/change/")
    assert page.status_code == 200 and run_id in page.content.decode()
    assert admin_client.get("/admin/durable_dashboard/auditentry/add/").status_code == 403
    admin_client.post(f"/admin/durable_dashboard/auditentry/{entry.pk}/delete/", {"post": "yes"})
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_namespace_grants_are_managed_in_the_admin(admin_client, viewer):
    page = admin_client.post(
        "/admin/durable_dashboard/namespacegrant/add/", {"namespace": "team-a", "user": viewer.pk, "group": ""}
    )
    assert page.status_code == 302
    assert NamespaceGrant.objects.get().namespace == "team-a"


@pytest.mark.parametrize(
    "url",
    [
        LIST + "?q=%00",
        LIST + "?namespace=%00",
        LIST + "?tag=a%00b",
        "/admin/durable_dashboard/auditentry/?q=%00",
        "/admin/durable_dashboard/auditentry/?action__exact=%00",
    ],
)
def test_control_characters_in_admin_urls_are_not_a_500(admin_client, url):
    assert admin_client.get(url).status_code in (200, 302)


def test_control_characters_in_run_ids_are_404(admin_client):
    assert admin_client.get("/admin/durable/run/%00/change/").status_code == 404
    assert admin_client.post("/admin/durable/run/%00/act/requeue/").status_code == 404


def test_detail_shows_continue_as_new_lineage(admin_client):
    from durable.testing import run_until_settled

    first = durable.start("dash_chain", 0, run_id="chain")
    run_until_settled(first)
    run_until_settled("chain~1")
    assert run_until_settled("chain~2").output == 2
    middle = admin_client.get(detail("chain~1"))
    assert middle.context["continued_from"].id == "chain"
    assert middle.context["continued_to"].id == "chain~2"
    assert admin_client.get(detail("chain")).context["continued_from"] is None


def test_previous_in_chain():
    from durable_dashboard.admin import previous_in_chain

    assert previous_in_chain("a~1") == ["a"]
    assert previous_in_chain("a~3") == ["a~2"]
    assert previous_in_chain("a") == [] and previous_in_chain("a~retry~ff") == []


def test_detail_shows_waiting_on_a_child_and_an_update(admin_client, make_run):
    from durable.testing import run_until_settled

    parent = durable.start("dash_parent", run_id="dash-parent")
    run_until_settled(parent)
    page = admin_client.get(detail(parent))
    assert ("run", "dash-child") in [(w["kind"], w["what"]) for w in page.context["waiting_on"]]
    assert [c.id for c in page.context["children"]] == ["dash-child"]
    assert admin_client.get(detail("dash-child")).context["parent"].id == parent
    query = admin_client.get(detail(make_run("query")))
    assert [(w["kind"], w["what"]) for w in query.context["waiting_on"]] == [("update", "approve")]


@pytest.mark.parametrize(
    "query",
    [
        "?created_at__gte=3137-07-01T16:01:18%2B16:22",
        "?created_at__lt=0001-01-01T00:00:00%2B01:00",
        "?updated_at__gte=2026-02-31",
        "?updated_at__lt=9999-12-31T23:59:59-01:00",
    ],
)
def test_far_off_dates_in_the_admin_are_not_a_500(admin_client, query):
    assert admin_client.get(LIST + query).status_code in (200, 302)
