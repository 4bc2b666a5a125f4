"""REST API: every endpoint and action, authentication, permission denials, strict validation."""

from __future__ import annotations

import json

import pytest
from django.test import override_settings

from durable.models import Run
from durable_dashboard import operations
from durable_dashboard.models import AuditEntry

pytestmark = pytest.mark.django_db

BASE = "/api/durable"
RUN_ACTIONS = {
    # name: (method, url suffix, body, permission needed)
    "signal": ("post", "signal/", {"name": "go", "payload": 1}, "signal"),
    "cancel": ("post", "cancel/", {}, "cancel"),
    "cancel_compensate": ("post", "cancel/", {"compensate": True}, "cancel_compensate"),
    "requeue": ("post", "requeue/", {}, "requeue"),
    "redispatch": ("post", "redispatch/", {}, "redispatch"),
    "retry": ("post", "retry-with-input/", {"input": {"ok": True}}, "retry"),
    "fork": ("post", "fork/", {"from_seq": 1}, "fork"),
    "continue": ("post", "continue/", {}, "continue"),
    "update": ("post", "update/approve/", {"arg": 1}, "update"),
    "republish": ("post", "republish/", {}, "republish"),
}


def post(client, url, body):
    return client.post(url, json.dumps(body), content_type="application/json")


# -- authentication ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "method,url",
    [
        ("get", "/runs/"),
        ("get", "/runs/x/"),
        ("post", "/runs/"),
        ("post", "/runs/x/cancel/"),
        ("post", "/runs/bulk/cancel/"),
        ("get", "/workflows/"),
        ("get", "/schema/"),
        ("get", "/runs/x/events/k/"),
    ],
)
def test_anonymous_is_refused(api, method, url):
    response = getattr(api(), method)(BASE + url)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Token")


def test_token_and_session_authentication(api, viewer, client, make_run):
    run_id = make_run("waiting")
    assert api(viewer).get(f"{BASE}/runs/").status_code == 200
    bad = api()
    bad.credentials(HTTP_AUTHORIZATION="Token nope")
    assert bad.get(f"{BASE}/runs/").status_code == 401
    client.force_login(viewer)
    assert client.get(f"{BASE}/runs/{run_id}/").status_code == 200


def test_inactive_user_is_refused(api, viewer):
    viewer.is_active = False
    viewer.save()
    assert api(viewer).get(f"{BASE}/runs/").status_code == 401


def test_user_without_view_permission_is_refused(api, make_user):
    nobody = make_user("nobody", view=False)
    response = api(nobody).get(f"{BASE}/runs/")
    assert response.status_code == 403
    assert "durable.view_run" in response.json()["detail"]
    assert api(nobody).get(f"{BASE}/workflows/").status_code == 403


def test_action_permission_without_view_permission_is_refused(api, make_user, make_run):
    run_id = make_run("waiting")
    user = make_user("blind", "cancel", view=False)
    assert post(api(user), f"{BASE}/runs/{run_id}/cancel/", {}).status_code == 403
    assert Run.objects.get(id=run_id).status == "suspended"


# -- permission denials, one per action ----------------------------------------------------


@pytest.mark.parametrize("action", sorted(RUN_ACTIONS))
def test_viewer_may_not_act(api, viewer, make_run, action):
    run_id = make_run("failed")
    _method, suffix, body, perm = RUN_ACTIONS[action]
    response = post(api(viewer), f"{BASE}/runs/{run_id}/{suffix}", body)
    assert response.status_code == 403
    assert f"durable_dashboard.{perm}_run" in response.json()["detail"]
    assert Run.objects.get(id=run_id).status == "failed"
    assert not AuditEntry.objects.exists()


@pytest.mark.parametrize("action", sorted(RUN_ACTIONS))
def test_each_action_needs_its_own_permission(api, make_user, make_run, action):
    """A user holding every action permission except this one is refused this one."""
    others = [a for a in operations.LABELS if a != RUN_ACTIONS[action][3]]
    user = make_user("almost", *others)
    run_id = make_run("failed")
    _method, suffix, body, _perm = RUN_ACTIONS[action]
    assert post(api(user), f"{BASE}/runs/{run_id}/{suffix}", body).status_code == 403


def test_viewer_may_not_start(api, viewer):
    response = post(api(viewer), f"{BASE}/runs/", {"workflow": "dash_wait", "input": 1})
    assert response.status_code == 403
    assert not Run.objects.exists()


@pytest.mark.parametrize("action", ["cancel", "requeue", "signal", "retry", "redispatch", "republish"])
def test_viewer_may_not_bulk(api, viewer, make_run, action):
    make_run("failed")
    body = {"filter": {"workflow": "dash_fail"}, "params": {"name": "go"} if action == "signal" else {}}
    assert post(api(viewer), f"{BASE}/runs/bulk/{action}/", body).status_code == 403


def test_bulk_cancel_with_compensation_needs_its_permission(api, make_user, make_run):
    make_run("waiting")
    user = make_user("canceller", "cancel")
    body = {"filter": {"workflow": "dash_wait"}, "params": {"compensate": True}}
    assert post(api(user), f"{BASE}/runs/bulk/cancel/", body).status_code == 403


# -- start ---------------------------------------------------------------------------------


def test_start_creates_then_is_idempotent(api, operator):
    client = api(operator)
    body = {
        "workflow": "dash_wait",
        "input": {"a": 1},
        "run_id": "order-1",
        "tags": ["x"],
        "search_attributes": {"k": 1},
    }
    first = post(client, f"{BASE}/runs/", body)
    assert first.status_code == 201, first.content
    data = first.json()
    assert data["id"] == "order-1" and data["status"] == "pending" and data["input"] == {"a": 1}
    assert "x" in data["tags"] and data["search_attributes"] == {"k": 1}
    again = post(client, f"{BASE}/runs/", {**body, "input": {"a": 2}})
    assert again.status_code == 200
    assert again.json()["input"] == {"a": 1}
    assert Run.objects.count() == 1
    entry = AuditEntry.objects.filter(action="start").first()
    assert entry.username == "operator" and entry.run_ids == ["order-1"] and entry.via == "api" and entry.ok


def test_start_of_a_singleton_whose_queue_is_full_is_429_and_starts_nothing(api, operator):
    client = api(operator)
    body = {"workflow": "dash_import", "input": {"account": "acme"}, "run_id": "imp-1"}
    assert post(client, f"{BASE}/runs/", body).status_code == 201
    refused = post(client, f"{BASE}/runs/", {**body, "run_id": "imp-2"})
    assert refused.status_code == 429, refused.content
    data = refused.json()
    assert data["code"] == "queue_full"
    assert "dash_import" in data["detail"] and "'acme'" in data["detail"]
    assert list(Run.objects.values_list("id", flat=True)) == ["imp-1"]
    assert post(client, f"{BASE}/runs/", body).status_code == 200  # the same id stays idempotent
    entry = AuditEntry.objects.filter(action="start", ok=False).get()
    assert entry.run_ids == ["imp-2"]


def test_start_without_run_id_generates_one(api, operator):
    response = post(api(operator), f"{BASE}/runs/", {"workflow": "dash_sleep"})
    assert response.status_code == 201
    assert Run.objects.filter(id=response.json()["id"]).exists()


def test_start_runs_newest_version_and_its_validation(api, operator):
    response = post(api(operator), f"{BASE}/runs/", {"workflow": "dash_order", "input": {"id": 1}})
    assert response.status_code == 201 and response.json()["version"] == 2
    refused = post(api(operator), f"{BASE}/runs/", {"workflow": "dash_order", "input": {"no": 1}})
    assert refused.status_code == 400
    assert refused.json()["code"] == "invalid_input" and "needs an id" in refused.json()["detail"]


@pytest.mark.parametrize(
    "body,field",
    [
        ({"workflow": "no_such_workflow"}, "workflow_not_found"),
        ({}, "workflow"),
        ({"workflow": 12}, "workflow"),
        ({"workflow": "dash_wait", "run_id": "has space"}, "run_id"),
        ({"workflow": "dash_wait", "run_id": ""}, "run_id"),
        ({"workflow": "dash_wait", "run_id": "x" * 256}, "run_id"),
        ({"workflow": "dash_wait", "tags": "notalist"}, "tags"),
        ({"workflow": "dash_wait", "tags": [1, {}]}, "tags"),
        ({"workflow": "dash_wait", "search_attributes": [1]}, "search_attributes"),
        ({"workflow": "dash_wait", "priority": "high"}, "priority"),
        ({"workflow": "dash_wait", "priority": 2**40}, "priority"),
        ({"workflow": "dash_sleep", "input": {"unexpected": 1}}, "invalid_input"),
        ({"workflow": "dash_wait", "namespace": "two words"}, "namespace"),
    ],
)
def test_start_rejects_bad_input(api, operator, body, field):
    response = post(api(operator), f"{BASE}/runs/", body)
    assert response.status_code == 400, response.content
    data = response.json()
    assert field in data.get("errors", {}) or data["code"] == field
    assert data["detail"]
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    "raw",
    [b"{not json", b"[1, 2]", b'"a string"', b"null", b'{"workflow": NaN}', b"\xff\xfe", b"[" * 5000 + b"]" * 5000],
)
def test_malformed_bodies_are_400(api, operator, raw):
    response = api(operator).post(f"{BASE}/runs/", raw, content_type="application/json")
    assert response.status_code == 400, response.content
    assert "detail" in response.json()


def test_deep_nesting_is_400(api, operator):
    nested = {"a": 1}
    for _ in range(100):
        nested = {"a": nested}
    response = post(api(operator), f"{BASE}/runs/", {"workflow": "dash_wait", "input": nested})
    assert response.status_code == 400


def test_oversized_input_is_400_and_oversized_body_413(api, operator):
    with override_settings(DURABLE={"TRANSPORT": "manual", "MAX_PAYLOAD_BYTES": 1000}):
        response = post(api(operator), f"{BASE}/runs/", {"workflow": "dash_wait", "input": "x" * 2000})
        assert response.status_code == 400
        assert "limit" in response.json()["detail"]
        huge = post(api(operator), f"{BASE}/runs/", {"workflow": "dash_wait", "input": "x" * 200_000})
        assert huge.status_code == 413
    assert not Run.objects.exists()


def test_unsupported_media_type_is_415(api, operator):
    response = api(operator).post(f"{BASE}/runs/", "workflow=dash_wait", content_type="text/plain")
    assert response.status_code == 415


# -- list and detail -----------------------------------------------------------------------


def test_list_newest_first_with_filters(api, viewer, make_run):
    a = make_run("failed", run_id="a", tags=["vip"])
    b = make_run("waiting", run_id="b", namespace="team-a")
    c = make_run("completed", run_id="c")
    client = api(viewer)

    def ids(query=""):
        response = client.get(f"{BASE}/runs/{query}")
        assert response.status_code == 200, response.content
        return [r["id"] for r in response.json()["results"]]

    assert ids() == [c, b, a]
    assert ids("?status=failed") == [a]
    assert ids("?status=failed,completed") == [c, a]
    assert ids("?workflow=dash_wait") == [b]
    assert ids("?namespace=team-a") == [b]
    assert ids("?tag=vip") == [a]
    assert ids("?version=1") == [c, b, a]
    assert ids("?version=7") == []
    assert ids("?q=b") == [b]
    assert ids("?q=vip") == [a]
    assert ids("?q=dash_fail") == [c, a]
    assert ids("?created_after=2000-01-01T00:00:00Z") == [c, b, a]
    assert ids("?created_before=2000-01-01T00:00:00Z") == []
    assert ids("?updated_after=2000-01-01T00:00:00Z&status=suspended") == [b]
    row = client.get(f"{BASE}/runs/?q=a").json()["results"][0]
    assert "input" not in row and row["status"] == "failed"


@pytest.mark.parametrize("query", ["?status=nope", "?version=abc", "?created_after=yesterday", "?version=0"])
def test_list_rejects_bad_filters(api, viewer, query):
    response = api(viewer).get(f"{BASE}/runs/{query}")
    assert response.status_code == 400


def test_list_cursor_pagination(api, viewer, make_run):
    for i in range(5):
        make_run("pending", run_id=f"r{i}")
    client = api(viewer)
    page = client.get(f"{BASE}/runs/?page_size=2").json()
    seen = [r["id"] for r in page["results"]]
    while page["next"]:
        page = client.get(page["next"]).json()
        seen += [r["id"] for r in page["results"]]
    assert seen == ["r4", "r3", "r2", "r1", "r0"]
    garbage = client.get(f"{BASE}/runs/?cursor=garbage")
    assert garbage.status_code == 400
    assert garbage.json()["code"] == "invalid"


def test_detail_has_history_waiters_and_signals(api, viewer, make_run):
    run_id = make_run("waiting")
    import durable

    durable.signal(run_id, "other", {"early": True})
    data = api(viewer).get(f"{BASE}/runs/{run_id}/").json()
    assert data["input"] == {"n": 1}
    assert [(c["seq"], c["kind"], c["status"]) for c in data["checkpoints"]] == [
        (1, "local", "completed"),
        (2, "signal", "pending"),
    ]
    assert [w["name"] for w in data["waiters"]] == ["go"]
    assert [(s["name"], s["payload"]) for s in data["buffered_signals"]] == [("other", {"early": True})]


def test_detail_of_failed_run_has_error(api, viewer, make_run):
    data = api(viewer).get(f"{BASE}/runs/{make_run('failed')}/").json()
    assert data["status"] == "failed" and data["error"]["message"]


def test_unknown_run_is_404(api, operator):
    client = api(operator)
    assert client.get(f"{BASE}/runs/missing/").status_code == 404
    for action, (method, suffix, body, perm) in RUN_ACTIONS.items():
        response = post(client, f"{BASE}/runs/missing/{suffix}", body)
        assert response.status_code == 404, action
    assert client.get(f"{BASE}/runs/missing/events/k/").status_code == 404


def test_workflows(api, viewer):
    rows = {w["name"]: w for w in api(viewer).get(f"{BASE}/workflows/").json()}
    assert rows["dash_order"]["versions"] == [1, 2] and rows["dash_order"]["latest"] == 2
    assert rows["dash_wait"]["tags"] == ["dash"] and rows["dash_sleep"]["takes_input"] is False


# -- actions -------------------------------------------------------------------------------


def test_signal_wakes_the_run(api, operator, make_run):
    run_id = make_run("waiting")
    response = post(api(operator), f"{BASE}/runs/{run_id}/signal/", {"name": "go", "payload": {"v": 2}})
    assert response.status_code == 200 and response.json()["ok"] is True
    from durable.testing import run_until_settled

    assert run_until_settled(run_id).output == {"v": 2}
    entry = AuditEntry.objects.get(action="signal")
    assert entry.params == {"name": "go", "payload": {"v": 2}} and entry.results[0]["ok"]


def test_signal_errors(api, operator, make_run):
    client = api(operator)
    done = make_run("completed")
    response = post(client, f"{BASE}/runs/{done}/signal/", {"name": "go"})
    assert response.status_code == 409 and response.json()["code"] == "invalid_run_state"
    waiting = make_run("waiting")
    assert post(client, f"{BASE}/runs/{waiting}/signal/", {"name": "two words"}).status_code == 400
    assert post(client, f"{BASE}/runs/{waiting}/signal/", {"payload": 1}).status_code == 400
    assert post(client, f"{BASE}/runs/{waiting}/signal/", [1]).status_code == 400
    failed = AuditEntry.objects.get(action="signal")
    assert failed.ok is False and failed.results[0]["code"] == "invalid_run_state"


def test_cancel_and_cancel_again(api, operator, make_run):
    run_id = make_run("waiting")
    client = api(operator)
    first = post(client, f"{BASE}/runs/{run_id}/cancel/", {"compensate": False})
    assert first.status_code == 200 and first.json()["result"] == {"cancelled": True}
    assert Run.objects.get(id=run_id).status == "cancelled"
    second = post(client, f"{BASE}/runs/{run_id}/cancel/", {})
    assert second.status_code == 200 and second.json()["result"] == {"cancelled": False}
    assert post(client, f"{BASE}/runs/{run_id}/cancel/", {"compensate": "maybe"}).status_code == 400


def test_cancel_and_bulk_cancel_keep_the_reason(api, operator, make_run):
    run_id = make_run("waiting")
    client = api(operator)
    assert post(client, f"{BASE}/runs/{run_id}/cancel/", {"reason": "fraud check"}).status_code == 200
    assert AuditEntry.objects.get(action="cancel").reason == "fraud check"
    others = [make_run("waiting") for _ in range(2)]
    body = {"filter": {"ids": others}, "reason": "campaign withdrawn"}
    assert post(client, f"{BASE}/runs/bulk/cancel/", body).status_code == 200
    assert AuditEntry.objects.order_by("-id").first().reason == "campaign withdrawn"
    too_long = post(client, f"{BASE}/runs/{make_run('waiting')}/cancel/", {"reason": "x" * 1001})
    assert too_long.status_code == 400


def test_cancel_with_compensation(api, operator, make_run):
    run_id = make_run("waiting")
    response = post(api(operator), f"{BASE}/runs/{run_id}/cancel/", {"compensate": True})
    assert response.status_code == 200 and response.json()["result"] == {"cancelled": True}
    from durable.testing import run_until_settled

    assert run_until_settled(run_id).status == "cancelled"
    assert AuditEntry.objects.get().action == "cancel_compensate"


def test_requeue(api, operator, make_run):
    client = api(operator)
    failed = make_run("failed")
    response = post(client, f"{BASE}/runs/{failed}/requeue/", {})
    assert response.status_code == 200 and response.json()["message"] == "requeued"
    assert Run.objects.get(id=failed).status == "pending"
    waiting = make_run("waiting")
    conflict = post(client, f"{BASE}/runs/{waiting}/requeue/", {})
    assert conflict.status_code == 409 and "failed" in conflict.json()["detail"]


def test_redispatch(api, operator, make_run):
    run_id = make_run("step")
    response = post(api(operator), f"{BASE}/runs/{run_id}/redispatch/", {})
    assert response.status_code == 200 and response.json()["result"] == {"redispatched": 1}


def test_retry_with_input(api, operator, make_run):
    client = api(operator)
    failed = make_run("failed")
    response = post(client, f"{BASE}/runs/{failed}/retry-with-input/", {"input": {"ok": True}})
    assert response.status_code == 200, response.content
    new_id = response.json()["result"]["new_run_id"]
    assert Run.objects.get(id=new_id).retry_of == failed
    waiting = make_run("waiting")
    assert post(client, f"{BASE}/runs/{waiting}/retry-with-input/", {"input": 1}).status_code == 409
    assert post(client, f"{BASE}/runs/{failed}/retry-with-input/", "nope").status_code == 400


def test_update_is_validated_then_delivered(api, operator, make_run):
    from durable.testing import run_until_settled

    run_id = make_run("query")
    client = api(operator)
    refused = post(client, f"{BASE}/runs/{run_id}/update/approve/", {"arg": {"nobody": 1}})
    assert refused.status_code == 400 and refused.json()["code"] == "update_rejected"
    assert "needs 'by'" in refused.json()["detail"]
    unknown = post(client, f"{BASE}/runs/{run_id}/update/explode/", {"arg": 1})
    assert unknown.status_code == 400 and "accepts no update" in unknown.json()["detail"]
    accepted = post(client, f"{BASE}/runs/{run_id}/update/approve/", {"arg": {"by": "ada"}})
    assert accepted.status_code == 200 and accepted.json()["result"] == {"accepted": True}
    assert run_until_settled(run_id).output == {"by": "ada"}
    assert [e.ok for e in AuditEntry.objects.filter(action="update").order_by("id")] == [False, False, True]


def test_events_are_read_with_view_permission(api, viewer, make_run):
    run_id = make_run("query")
    client = api(viewer)
    response = client.get(f"{BASE}/runs/{run_id}/events/stage/")
    assert response.status_code == 200
    assert response.json() == {"run_id": run_id, "key": "stage", "value": "waiting for approval"}
    missing = client.get(f"{BASE}/runs/{run_id}/events/nope/")
    assert missing.status_code == 404 and missing.json()["code"] == "event_not_set"


def test_republish_lifecycle_events(api, operator, make_run):
    source = make_run("source")
    from durable.testing import drive

    drive()
    response = post(api(operator), f"{BASE}/runs/{source}/republish/", {})
    assert response.status_code == 200, response.content
    assert "dash_listener" in response.json()["result"]["subscribers"]
    assert Run.objects.filter(workflow="dash_listener").count() == 1  # never started twice
    waiting = make_run("waiting")
    quiet = post(api(operator), f"{BASE}/runs/{waiting}/republish/", {})
    assert quiet.status_code == 200 and quiet.json()["result"] == {"subscribers": {}}


def test_update_name_is_validated(api, operator, make_run):
    run_id = make_run("waiting")
    response = post(api(operator), f"{BASE}/runs/{run_id}/update/{'x' * 300}/", {"arg": 1})
    assert response.status_code == 400


# -- bulk ----------------------------------------------------------------------------------


def test_bulk_cancel_over_a_filter(api, operator, make_run):
    waiting = [make_run("waiting") for _ in range(3)]
    done = make_run("completed")
    response = post(api(operator), f"{BASE}/runs/bulk/cancel/", {"filter": {"workflow": "dash_wait"}, "limit": 2})
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["matched"] == 2 and data["succeeded"] == 2 and data["failed"] == 0
    assert Run.objects.filter(id__in=waiting, status="cancelled").count() == 2
    assert Run.objects.get(id=done).status == "completed"
    entry = AuditEntry.objects.get(action="cancel")
    assert len(entry.run_ids) == 2 and entry.via == "api"


def test_bulk_requeue_by_ids_reports_each_run(api, operator, make_run):
    failed = make_run("failed")
    waiting = make_run("waiting")
    body = {"filter": {"ids": [failed, waiting, "ghost"]}}
    data = post(api(operator), f"{BASE}/runs/bulk/requeue/", body).json()
    assert data["matched"] == 2
    by_id = {r["run_id"]: r for r in data["results"]}
    assert by_id[failed]["ok"] and not by_id[waiting]["ok"]
    assert by_id[waiting]["code"] == "invalid_run_state"
    assert AuditEntry.objects.get(action="requeue").ok is False


def test_bulk_signal_and_retry(api, operator, make_run):
    waiting = make_run("waiting")
    client = api(operator)
    body = {"filter": {"status": "suspended"}, "params": {"name": "go", "payload": 3}}
    assert post(client, f"{BASE}/runs/bulk/signal/", body).json()["succeeded"] == 1
    assert AuditEntry.objects.get(action="signal").run_ids == [waiting]
    failed = make_run("failed")
    body = {"filter": {"ids": [failed]}, "params": {"input": {"ok": True}}}
    data = post(client, f"{BASE}/runs/bulk/retry/", body).json()
    assert data["succeeded"] == 1 and data["results"][0]["result"]["new_run_id"].startswith(failed)
    redispatch = post(client, f"{BASE}/runs/bulk/redispatch/", {"filter": {"status": "pending"}})
    assert redispatch.status_code == 200


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"filter": {}},
        {"filter": {"nope": 1}},
        {"filter": {"status": "nope"}},
        {"filter": {"workflow": ["a"]}},
        {"filter": {"ids": "a"}},
        {"filter": {"ids": [1]}},
        {"filter": {"status": "failed"}, "limit": 0},
        {"filter": {"status": "failed"}, "limit": 100_000},
        {"filter": {"status": "failed"}, "limit": "many"},
        {"filter": "status=failed"},
        {"filter": {"status": "failed"}, "params": []},
    ],
)
def test_bulk_rejects_bad_bodies(api, operator, body):
    assert post(api(operator), f"{BASE}/runs/bulk/cancel/", body).status_code == 400


def test_bulk_signal_params_are_validated(api, operator):
    response = post(api(operator), f"{BASE}/runs/bulk/signal/", {"filter": {"status": "suspended"}, "params": {}})
    assert response.status_code == 400 and "params" in response.json()["errors"]
    assert response.json()["detail"].startswith("Invalid request: params.name")


def test_bulk_unknown_action_is_404(api, operator):
    assert post(api(operator), f"{BASE}/runs/bulk/explode/", {"filter": {"status": "failed"}}).status_code == 404


def test_bulk_republish_and_cancel_with_compensation(api, operator, make_run):
    waiting = make_run("waiting")
    source = make_run("source")
    client = api(operator)
    republish = post(client, f"{BASE}/runs/bulk/republish/", {"filter": {"ids": [source]}})
    assert republish.status_code == 200 and republish.json()["succeeded"] == 1
    body = {"filter": {"ids": [waiting]}, "params": {"compensate": True}}
    compensate = post(client, f"{BASE}/runs/bulk/cancel/", body)
    assert compensate.status_code == 200 and compensate.json()["action"] == "cancel_compensate"
    from durable.testing import run_until_settled

    assert run_until_settled(waiting).status == "cancelled"


# -- schema, docs, throttling ---------------------------------------------------------------


def test_schema_and_docs(api, viewer, client):
    schema = api(viewer).get(f"{BASE}/schema/?format=json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    for path in [
        "/api/durable/runs/",
        "/api/durable/runs/{id}/",
        "/api/durable/runs/{id}/signal/",
        "/api/durable/runs/{id}/cancel/",
        "/api/durable/runs/{id}/requeue/",
        "/api/durable/runs/{id}/redispatch/",
        "/api/durable/runs/{id}/retry-with-input/",
        "/api/durable/runs/{id}/fork/",
        "/api/durable/runs/{id}/continue/",
        "/api/durable/callbacks/{token}/",
        "/api/durable/runs/{id}/update/{update_name}/",
        "/api/durable/runs/{id}/events/{key}/",
        "/api/durable/runs/{id}/republish/",
        "/api/durable/runs/bulk/{bulk_action}/",
        "/api/durable/workflows/",
    ]:
        assert path in paths, path
    client.force_login(viewer)
    docs = client.get(f"{BASE}/docs/")
    assert docs.status_code == 200
    html = docs.content.decode()
    assert "swagger" in html.lower() and "cdn" not in html.lower() and "https://" not in html


def test_throttling_is_configurable(api, viewer):
    client = api(viewer)
    with override_settings(DURABLE_DASHBOARD={"THROTTLE_RATE": "3/minute"}):
        codes = [client.get(f"{BASE}/workflows/").status_code for _ in range(4)]
    assert codes == [200, 200, 200, 429]
    with override_settings(DURABLE_DASHBOARD={"THROTTLE_RATE": None}):
        assert client.get(f"{BASE}/workflows/").status_code == 200


# -- text no database column can hold -------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b'{"workflow": "dash_wait", "input": "nul \\u0000 inside"}',
        b'{"workflow": "dash_wait", "input": {"\\u0000": 1}}',
        b'{"workflow": "dash_wait", "input": "lone \\ud800 surrogate"}',
    ],
)
def test_unstorable_strings_are_400(api, operator, raw):
    response = api(operator).post(f"{BASE}/runs/", raw, content_type="application/json")
    assert response.status_code == 400 and response.json()["code"] == "parse_error"
    assert not Run.objects.exists()


def test_control_characters_in_urls_and_filters(api, operator, make_run):
    run_id = make_run("waiting")
    client = api(operator)
    assert client.get(f"{BASE}/runs/%00/").status_code == 404
    assert post(client, f"{BASE}/runs/{run_id}/update/%00/", {}).status_code == 404
    assert client.get(f"{BASE}/runs/{run_id}/events/%00/").status_code == 404
    assert client.get(f"{BASE}/runs/?workflow=%00").status_code == 400
    assert client.get(f"{BASE}/runs/?q=%00").status_code == 400
    assert client.get(f"{BASE}/no/such/path/").json() == {"detail": "Not found.", "code": "not_found"}


def test_every_error_has_detail_and_code(api, operator, viewer, make_run):
    run_id = make_run("completed")
    answers = [
        api().get(f"{BASE}/runs/"),
        api(viewer).post(f"{BASE}/runs/{run_id}/cancel/"),
        api(operator).get(f"{BASE}/runs/nope/"),
        post(api(operator), f"{BASE}/runs/{run_id}/signal/", {"name": "go"}),
        post(api(operator), f"{BASE}/runs/", {"workflow": 1}),
        api(operator).post(f"{BASE}/runs/", b"{", content_type="application/json"),
    ]
    assert [a.status_code for a in answers] == [401, 403, 404, 409, 400, 400]
    for answer in answers:
        body = answer.json()
        assert isinstance(body["detail"], str) and body["detail"] and isinstance(body["code"], str)


@pytest.mark.parametrize(
    "query,status",
    [
        ("?created_after=3137-07-01T16:01:18%2B16:22", 200),  # offset PostgreSQL would refuse: normalised
        ("?created_before=2144-08-18T04:08:52.1Z", 200),
        ("?updated_after=0001-01-01T00:00:00%2B01:00", 400),  # before year 1 in UTC
        ("?updated_before=9999-12-31T23:59:59-01:00", 400),  # after year 9999 in UTC
    ],
)
def test_far_off_dates_are_normalised_or_refused(api, viewer, query, status):
    assert api(viewer).get(f"{BASE}/runs/{query}").status_code == status
