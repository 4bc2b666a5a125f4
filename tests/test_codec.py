"""Encryption at rest (DURABLE["CODEC"]): nothing of a payload in clear in any row, rotation, tampering.

Runs on SQLite and PostgreSQL (the portable and the PostgreSQL store write the
same columns through the same payload fields).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.db import connection
from django.test import override_settings

import durable
from durable.codecs import is_envelope
from durable.codecs.fields import PayloadField
from durable.models import Checkpoint, Run
from durable.testing import drive, fake_clock, run_until_settled

pytestmark = pytest.mark.django_db

KEY_1 = base64.urlsafe_b64encode(bytes(range(32))).decode()
KEY_2 = base64.urlsafe_b64encode(bytes(range(32, 64))).decode()
BASE = {"TRANSPORT": "manual", "LEASE": 30, "HEARTBEAT_INTERVAL": 0.001}
AESGCM = "durable.codecs.AESGCMCodec"
# Plaintext markers: each payload of the workflow below carries one; none may reach a row in clear.
MARKERS = ["INPUT-4111", "STEPARG-5500", "STEPOUT-6011", "PROGRESS-3782", "SIGNAL-3530", "UPDATE-6304", "EVENT-2223"]
MARKERS += ["QUERY-2720", "ERROR-3056", "LOCAL-4000"]


def codec_on(*kids: str) -> Any:
    keys = {"k1": KEY_1, "k2": KEY_2}
    return override_settings(DURABLE={**BASE, "CODEC": AESGCM, "CODEC_KEYS": {kid: keys[kid] for kid in kids}})


@durable.step
def cx_step(card: str) -> dict[str, str]:
    durable.heartbeat({"seen": "PROGRESS-3782"})
    return {"card": card, "note": "STEPOUT-6011"}


@durable.workflow(name="cx_flow", updates={"address": None})
def cx_flow(ctx: Any, value: dict[str, Any]) -> Any:
    stepped = ctx.step(cx_step, "STEPARG-5500")
    local = ctx.local_step("cx_local", lambda: "LOCAL-4000")
    ctx.set_event("stage", "QUERY-2720")
    signalled = ctx.wait_signal("go")
    updated = ctx.wait_update("address")
    event = ctx.wait_event("cx.paid", match={"order": value["order"]}, timeout="1h")
    if value.get("fail"):
        raise ValueError(f"declined ERROR-3056 {signalled} {updated} {event} {stepped} {local}")
    return {"stepped": stepped, "local": local, "signalled": signalled, "updated": updated, "event": event}


@durable.workflow(name="cx_echo")
def cx_echo(ctx: Any, value: Any) -> Any:
    return ctx.local_step("cx_echo_step", lambda: value)


def raw_rows() -> list[tuple[str, str]]:
    """Every row of every table of the durable app, as (table, text of its values), by raw SQL."""
    found = []
    with connection.cursor() as cursor:
        for model in apps.get_app_config("durable").get_models():
            table = model._meta.db_table
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            found += [(table, " ".join(str(value) for value in row)) for row in cursor.fetchall()]
    return found


def drive_flow(run_id: str, fail: bool) -> None:
    durable.start(cx_flow, {"card": "INPUT-4111", "order": "o-1", "fail": fail}, run_id=run_id)
    run_until_settled(run_id)
    durable.signal(run_id, "go", {"code": "SIGNAL-3530"})
    run_until_settled(run_id)
    assert durable.update(run_id, "address", "UPDATE-6304").accepted
    run_until_settled(run_id)
    durable.publish_event("cx.paid", {"order": "o-1", "ref": "EVENT-2223"}, id=f"{run_id}-e")


def test_nothing_in_clear_in_any_row_after_steps_signals_updates_events_and_an_error():
    with codec_on("k1"), fake_clock():
        # An event nobody waits for stays buffered: its payload too.
        durable.publish_event("cx.unwaited", {"ref": "EVENT-2223"}, id="unwaited")
        drive_flow("cx-ok", fail=False)
        drive_flow("cx-bad", fail=True)
        ok, bad = run_until_settled("cx-ok"), run_until_settled("cx-bad")
        # Read back through the codec: every value as it was written.
        assert ok.status == "completed" and ok.output["event"] == {"order": "o-1", "ref": "EVENT-2223"}
        assert ok.output["stepped"] == {"card": "STEPARG-5500", "note": "STEPOUT-6011"}
        assert durable.get_event("cx-ok", "stage") == "QUERY-2720"
        assert bad.status == "failed" and "ERROR-3056" in bad.error["message"] and bad.error["type"] == "ValueError"
        progress = Checkpoint.objects.get(run_id="cx-ok", name="cx_step").progress
        assert progress == {"seen": "PROGRESS-3782"}
    rows = raw_rows()
    leaks = [(table, marker) for table, text in rows for marker in MARKERS if marker in text]
    assert leaks == []
    # What stays in clear, searchable: ids, workflow names, statuses, the error's code and type.
    runs = {text.split()[0]: text for table, text in rows if table == Run._meta.db_table}
    assert "cx_flow" in runs["cx-bad"] and "failed" in runs["cx-bad"] and "ValueError" in runs["cx-bad"]
    assert Run.objects.filter(status="failed", error__type="ValueError").count() == 1


def test_rows_written_before_the_codec_still_read_and_the_codec_reads_as_plain_without_it():
    plain = run_until_settled(durable.start(cx_echo, {"n": "before"}))
    with codec_on("k1"):
        assert durable.get_run(plain.id).output == {"n": "before"}
        sealed = run_until_settled(durable.start(cx_echo, {"n": "after"}))
    assert sealed.status == "completed"
    stored = stored_values(Run, "output")
    assert not is_envelope(stored[plain.id]) and is_envelope(stored[sealed.id])
    # Without the codec, a sealed row is not a crash: it reads as undecodable.
    assert "DURABLE['CODEC'] is not set" in repr(Run.objects.get(id=sealed.id).output)


def stored_values(model: Any, column: str) -> dict[Any, Any]:
    """The stored JSON of ``column`` by primary key, by raw SQL (as the database holds it)."""
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {quote(model._meta.pk.column)}, {quote(column)} FROM {quote(model._meta.db_table)}")
        return {pk: json.loads(v) if isinstance(v, str) else v for pk, v in cursor.fetchall()}


def tamper(run_id: str) -> None:
    stored = stored_values(Run, "input")[run_id]
    sealed = bytearray(base64.urlsafe_b64decode(stored["ct"]))
    sealed[-1] ^= 1
    stored["ct"] = base64.urlsafe_b64encode(bytes(sealed)).decode()
    Run.objects.filter(id=run_id).update(input=stored)  # an envelope is written as it is


def test_a_tampered_row_fails_its_run_with_codec_error_once_and_the_worker_goes_on():
    with codec_on("k1"):
        durable.start(cx_echo, {"n": 1}, run_id="cx-tampered")
        tamper("cx-tampered")
        durable.start(cx_echo, {"n": 2}, run_id="cx-fine")
        drive()
        failed = durable.get_run("cx-tampered")
        assert failed.status == "failed" and failed.error["code"] == "codec_error"
        assert "does not decrypt with key 'k1'" in failed.error["message"]
        assert failed.error["retryable"] is False
        assert run_until_settled("cx-fine").output == {"n": 2}
        turns = Run.objects.get(id="cx-tampered").turns
        drive()  # a failed run is not taken again: no crash loop
        assert Run.objects.get(id="cx-tampered").turns == turns == 1


def test_an_unknown_key_fails_the_run_with_codec_error():
    with codec_on("k1"):
        durable.start(cx_echo, "secret", run_id="cx-old-key")
    with codec_on("k2"):
        drive()
        run = durable.get_run("cx-old-key")
    assert run.status == "failed" and run.error["code"] == "codec_error"
    assert "key 'k1', which is not in CODEC_KEYS" in run.error["message"]


def test_rotation_then_rekey_leaves_every_row_readable_with_only_the_new_key():
    with codec_on("k1"), fake_clock():
        drive_flow("cx-rot-ok", fail=False)
        drive_flow("cx-rot-bad", fail=True)
        run_until_settled("cx-rot-ok")
        run_until_settled("cx-rot-bad")
        durable.publish_event("cx.unwaited", {"ref": "EVENT-2223"}, id="rot-unwaited")
        before = decoded_rows()
    with codec_on("k2", "k1"):
        call_command("durable_rekey", batch_size=3, stdout=open("/dev/null", "w"))
    with codec_on("k2"):
        assert decoded_rows() == before
    kids = {
        v.get("kid")
        for model, column in payload_columns()
        for v in stored_values(model, column).values()
        if is_envelope(v)
    }
    assert kids == {"k2"}


def payload_columns() -> list[tuple[Any, str]]:
    return [
        (model, field.column)
        for model in apps.get_app_config("durable").get_models()
        for field in model._meta.concrete_fields
        if isinstance(field, PayloadField)
    ]


def decoded_rows() -> dict[tuple[str, Any, str], Any]:
    """Every payload value through the fields (decoded), by table, primary key and column."""
    values = {}
    for model, column in payload_columns():
        for pk, value in model.objects.values_list("pk", column):
            assert "undecodable" not in repr(value)
            values[(model._meta.db_table, pk, column)] = value
    return values


@pytest.mark.parametrize(
    ("codec", "keys", "says"),
    [
        (AESGCM, {"k1": base64.urlsafe_b64encode(b"x" * 16).decode()}, "decodes to 16 bytes; AES-256-GCM needs 32"),
        (AESGCM, {"k1": "not base64 !!"}, "key 'k1' is not urlsafe base64"),
        (AESGCM, {}, "CODEC_KEYS must be a non-empty dict"),
        (AESGCM, ["k1"], "CODEC_KEYS'] must be a dict"),
        (AESGCM, {"bad id": KEY_1}, "key id 'bad id' must be"),
        ("durable.codecs.NoSuchCodec", {"k1": KEY_1}, "cannot be imported"),
        ("durable.models.Run", {"k1": KEY_1}, "durable.models.Run"),
        ("nodots", {"k1": KEY_1}, "must be the dotted path of a codec class"),
    ],
)
def test_a_bad_codec_configuration_is_a_system_check_error(codec: str, keys: Any, says: str) -> None:
    from durable.checks import check_settings

    with override_settings(DURABLE={**BASE, "CODEC": codec, "CODEC_KEYS": keys}):
        found = check_settings()
    assert [error.id for error in found] == ["durable.E001"]
    assert says in found[0].msg


def test_the_aes_codec_without_cryptography_says_which_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from durable.checks import check_settings

    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    with override_settings(DURABLE={**BASE, "CODEC": AESGCM, "CODEC_KEYS": {"k1": KEY_1}}):
        found = check_settings()
    assert len(found) == 1 and "pip install 'django-durable[encryption]'" in found[0].msg


def test_rekey_refuses_bad_input_with_a_clear_error() -> None:
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="DURABLE\\['CODEC'\\] is not set"):
        call_command("durable_rekey")
    with codec_on("k1"), pytest.raises(CommandError, match="--batch-size must be a whole number, got 'x'"):
        call_command("durable_rekey", "--batch-size", "x")
    with codec_on("k1"), pytest.raises(CommandError, match="between 1 and 100000, got 0"):
        call_command("durable_rekey", "--batch-size", "0")


def test_rekey_dry_run_counts_and_writes_nothing_and_reports_undecodable_rows() -> None:
    import io

    from django.core.management.base import CommandError

    plain = run_until_settled(durable.start(cx_echo, {"n": "plain"})).id
    before = stored_values(Run, "output")[plain]
    out = io.StringIO()
    with codec_on("k1"):
        call_command("durable_rekey", "--dry-run", stdout=out)
        assert stored_values(Run, "output")[plain] == before
        # The run's input and output, the local step's input and output.
        assert "would rewrite 4 payload(s) under key 'k1'" in out.getvalue()
        durable.start(cx_echo, {"n": 1}, run_id="cx-rekey-tampered")
        tamper("cx-rekey-tampered")
    # Rows under the current key are not opened; the tampered one is under the key rotated out.
    with codec_on("k2", "k1"), pytest.raises(CommandError, match="1 stored payload\\(s\\) did not decode"):
        call_command("durable_rekey", stdout=out)
    assert "durable_run.input: did not decode: cx-rekey-tampered" in out.getvalue()
    assert is_envelope(stored_values(Run, "output")[plain])
