"""The write commands: each acts through the audited operations, as the OS user, with its exit codes."""

from __future__ import annotations

import getpass
import json

import pytest

import durable
from durable.models import Run, RunStatus
from durable.testing import run_until_settled
from durable_dashboard.models import AuditEntry


def _last_audit() -> AuditEntry:
    entry = AuditEntry.objects.order_by("-id").first()
    assert entry is not None
    return entry


def test_start_prints_the_id_and_audits_as_the_os_user(run_cmd):
    result = run_cmd("durable_start", "dash_wait", "--input", '{"n": 5}', "--run-id", "s-1", "--tag", "a", "--tag", "b")
    assert (result.code, result.out.strip()) == (0, "s-1")
    run = Run.objects.get(id="s-1")
    assert (run.input, run.tags, run.status) == ({"n": 5}, ["dash", "a", "b"], RunStatus.PENDING)
    entry = _last_audit()
    assert (entry.via, entry.action, entry.username, entry.user, entry.run_ids) == (
        "cli",
        "start",
        getpass.getuser(),
        None,
        ["s-1"],
    )


def test_start_is_idempotent_on_run_id(run_cmd):
    assert run_cmd("durable_start", "dash_wait", "--run-id", "s-2").code == 0
    assert run_cmd("durable_start", "dash_wait", "--run-id", "s-2", "--input", "[1]").out.strip() == "s-2"
    assert Run.objects.get(id="s-2").input is None


def test_start_reads_input_file_and_stdin(run_cmd, tmp_path):
    path = tmp_path / "input.json"
    path.write_text('{"from": "file"}')
    run_cmd("durable_start", "dash_wait", "--input-file", str(path), "--run-id", "s-file")
    run_cmd("durable_start", "dash_wait", "--input-file", "-", "--run-id", "s-stdin", stdin='{"from": "stdin"}')
    assert Run.objects.get(id="s-file").input == {"from": "file"}
    assert Run.objects.get(id="s-stdin").input == {"from": "stdin"}


def test_start_namespace(run_cmd):
    run_cmd("durable_start", "dash_wait", "--namespace", "team-b", "--run-id", "s-ns")
    assert Run.objects.get(id="s-ns").namespace == "team-b"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nobody"], "nobody"),
        (["dash_order", "--input", '{"no": "id"}'], "an order needs an id"),
        (["dash_wait", "--input", "{nope"], "--input is not valid JSON"),
        (["dash_wait", "--input", "1", "--input-file", "x.json"], "not allowed with argument"),
        (["dash_wait", "--input-file", "/no/such/file.json"], "--input-file: cannot read /no/such/file.json"),
        (["dash_wait", "--run-id", "has space"], "run_id"),
        (["dash_wait", "--timeout", "-1", "--wait"], "--timeout must not be negative"),
        ([], "the following arguments are required: WORKFLOW"),
    ],
)
def test_start_bad_arguments_exit_2(run_cmd, args, message):
    result = run_cmd("durable_start", *args)
    assert result.code == 2, result
    assert message in result.error
    assert not Run.objects.exists()


def test_start_wait_prints_the_settled_run(run_cmd):
    run_until_settled(durable.start("dash_fail", {"ok": True}, run_id="s-done"))
    result = run_cmd("durable_start", "dash_fail", "--run-id", "s-done", "--wait")
    assert result.code == 0
    assert json.loads(result.out)["output"] == "fixed"


def test_start_wait_exits_1_for_a_failed_run_and_on_timeout(run_cmd):
    run_until_settled(durable.start("dash_fail", {}, run_id="s-failed"))
    failed = run_cmd("durable_start", "dash_fail", "--run-id", "s-failed", "--wait")
    assert (failed.code, json.loads(failed.out)["status"]) == (1, "failed")
    assert "s-failed ended failed" in failed.error
    pending = run_cmd("durable_start", "dash_wait", "--run-id", "s-pending", "--wait", "--timeout", "0")
    assert pending.code == 1
    assert "still pending" in pending.error


def test_run_shows_fields_and_timeline(make_run, run_cmd):
    run_id = make_run("failed", run_id="f-1")
    result = run_cmd("durable_run", run_id)
    assert result.code == 0
    lines = result.out.splitlines()
    assert lines[0].split() == ["run", "f-1"]
    assert any(line.startswith("status") and line.endswith("failed") for line in lines)
    header = next(line for line in lines if line.startswith("#"))
    assert header.split() == ["#", "AT", "KIND", "NAME", "STATUS", "TRIES", "TOOK", "RESULT"]
    step = lines[lines.index(header) + 1]
    assert step.split()[0] == "1" and "charge" in step and "declined: card declined" in step


def test_run_json_has_history(make_run, run_cmd):
    run_id = make_run("completed", run_id="c-1")
    data = json.loads(run_cmd("durable_run", run_id, "--json").out)
    assert (data["id"], data["status"], data["output"]) == ("c-1", "completed", "fixed")
    assert data["history"] == []  # it completed without a recorded operation
    waiting = json.loads(run_cmd("durable_run", make_run("waiting"), "--json").out)
    assert [(cp["name"], cp["kind"]) for cp in waiting["history"]] == [("prepare", "local"), ("go", "signal")]


def test_run_unknown_exits_1_and_bad_id_exits_2(run_cmd):
    assert run_cmd("durable_run", "nope").code == 1
    assert "no run with id 'nope'" in run_cmd("durable_run", "nope").error
    assert run_cmd("durable_run", "bad id").code == 2


def test_signal_wakes_the_run_and_is_audited(make_run, run_cmd):
    run_id = make_run("waiting")
    result = run_cmd("durable_signal", run_id, "go", "--payload", '{"ok": 1}', "--reason", "approved by phone")
    assert result.code == 0
    assert "signal 'go' sent" in result.out
    run_until_settled(run_id)
    assert durable.get_run(run_id).output == {"ok": 1}
    entry = _last_audit()
    assert (entry.via, entry.action, entry.reason, entry.params) == (
        "cli",
        "signal",
        "approved by phone",
        {"name": "go", "payload": {"ok": 1}},
    )


def test_signal_refusals(make_run, run_cmd):
    assert run_cmd("durable_signal", "nope", "go").code == 1
    assert run_cmd("durable_signal", make_run("completed"), "go").code == 1
    bad = run_cmd("durable_signal", make_run("waiting"), "go", "--payload", "{")
    assert (bad.code, "--payload is not valid JSON" in bad.error) == (2, True)
    assert run_cmd("durable_signal", "only-id").code == 2


def test_retry_starts_a_new_run(make_run, run_cmd):
    run_id = make_run("failed", run_id="f-2")
    result = run_cmd("durable_retry", run_id, "--input", '{"ok": true}')
    assert result.code == 0
    new_id = result.out.strip()
    assert new_id.startswith("f-2~retry~")
    assert Run.objects.get(id=new_id).retry_of == "f-2"
    assert _last_audit().action == "retry"


def test_retry_refusals(make_run, run_cmd):
    assert run_cmd("durable_retry", "nope", "--input", "{}").code == 1
    assert run_cmd("durable_retry", make_run("waiting"), "--input", "{}").code == 1
    missing = run_cmd("durable_retry", "f-3")
    assert (missing.code, "one of the arguments --input --input-file is required" in missing.error) == (2, True)


def test_run_says_why_it_wakes(make_run, run_cmd):
    waiting = run_cmd("durable_run", make_run("waiting")).out
    assert "reconcile fallback (no timer: a safety re-check)" in waiting
    sleeping = run_cmd("durable_run", make_run("sleeping")).out
    wake = next(line for line in sleeping.splitlines() if line.startswith("next wake"))
    assert "(timer #1" in wake


def test_fork_starts_a_new_run_from_a_position(make_run, run_cmd):
    run_id = make_run("failed", run_id="f-4")
    result = run_cmd("durable_fork", run_id, "--from-seq", "1", "--input", '{"ok": true}', "--reason", "fixed")
    assert result.code == 0, result.error
    new = Run.objects.get(id=result.out.strip())
    assert (new.forked_from, new.forked_at_seq, new.input) == ("f-4", 1, {"ok": True})
    assert (_last_audit().action, _last_audit().reason) == ("fork", "fixed")
    kept = run_cmd("durable_fork", run_id, "--from-seq", "2")
    assert kept.code == 0 and Run.objects.get(id=kept.out.strip()).input == {"n": 1}


def test_fork_refusals(make_run, run_cmd):
    failed = make_run("failed", run_id="f-5")
    count = Run.objects.count()
    assert run_cmd("durable_fork", "nope", "--from-seq", "1").code == 1
    assert run_cmd("durable_fork", make_run("waiting"), "--from-seq", "1").code == 1
    far = run_cmd("durable_fork", failed, "--from-seq", "9")
    assert (far.code, "from_seq must be between 1 and 2" in far.error, "Traceback" in far.error) == (2, True, False)
    assert run_cmd("durable_fork", failed).code == 2
    assert Run.objects.count() == count + 1  # only the waiting run made above
