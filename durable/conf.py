"""``settings.DURABLE``: one dict of options with documented defaults.

Read through :func:`get` every time a value is needed (never at import time),
so ``override_settings(DURABLE={...})`` in tests takes effect at once. The
parsed result is cached by :mod:`durable.runtime` (the one home of
process-wide state) and dropped whenever Django reports a change of
``DURABLE`` or ``CELERY_BROKER_URL``; this module only parses.

Options (durations accept ``"30s"``-style strings or numbers of seconds):

``TRANSPORT``             ``None`` (auto: ``"celery"`` when ``CELERY_BROKER_URL``
                          is set, otherwise ``"inline"``), ``"inline"``,
                          ``"celery"`` or ``"manual"`` (nothing is pushed;
                          work is found by polling; used by tests).
``LEASE``                 30s. How long a turn owns its run without renewing.
``RECONCILE_AFTER``       5m. Fallback wake for a run waiting on an event
                          (signal, step result), so a lost wake is re-driven.
``MAX_RECOVERY_ATTEMPTS`` 5. Orphan recoveries before the run goes ``dead``.
``WORKER_INTERVAL``       1s. Poll period of the worker loop when idle.
``NOTIFY``                True. On PostgreSQL, a process on the ``manual``
                          transport sends a notification in the commit of a
                          start, a signal or a step result that wakes a run,
                          and ``durable_worker`` listens for it, so it takes
                          the run at once instead of at its next poll. False
                          turns both off (behind a pooler that cannot LISTEN).
``WORKER_THREADS``        4. Threads of the in-process (inline) transport, and of
                          the worker loop's due-run sweep when turns wait on I/O.
``EMBEDDED_WORKER``       True. Run the worker loop inside the web process
                          when the transport is ``inline``.
``DEFAULT_NAMESPACE``     ``"default"``.
``NAMESPACE_QUEUES``      False. With Celery, True sends the turns and steps of
                          runs of every namespace but ``DEFAULT_NAMESPACE`` to
                          queues of their own (``"durable.ns.<namespace>"``,
                          ``"<queue>.ns.<namespace>"``), so a Celery worker
                          serves the namespaces whose queues it consumes.
``STEP_EXECUTION_LEASE``  60s. A running step's owner renews it in the
                          background; once it lapses the step is presumed
                          lost with its worker: a failed attempt (code
                          ``worker_lost``) under the step's retry policy.
``STEP_LEASE``            60s. Lost-dispatch recovery: a pending step no worker
                          claimed within it is sent again (then after twice as
                          long each time, at most ``RECONCILE_AFTER``). None
                          turns it off (``manage.py check`` warns: a lost step
                          message then strands its run).
``STEP_REDISPATCH_MAX``   None (never give up). Re-dispatches before a step no
                          worker takes fails with ``remote_step_lost``.
``HEARTBEAT_INTERVAL``    5s. At most one persisted heartbeat per step per interval.
``MAX_PAYLOAD_BYTES``     1 MiB. Largest JSON input, output or signal payload.
``SWEEP_BATCH``           100. Rows each sweep handles per call.
``SWEEP_INTERVAL``        2s. With Celery, how often beat sends the sweep task.
``SWEEP_QUEUE``           ``"durable.sweeps"``. With Celery, the queue beat sends
                          the sweep task to: its own, so a backlog of work never
                          delays recovery. Some worker must consume it.
``FLEET_CHECK``           True. With Celery, park a run ``blocked`` instead of
                          dispatching a step that no live worker serves.
``FLEET_TTL``             30s. A worker's advertisement expires this long after
                          its last heartbeat.
``EAGER_STEPS``           True. A Celery worker whose turn reaches ``ctx.step`` for
                          a queue it consumes runs the step itself, under the
                          run's lease, as a local step runs (one commit, no
                          broker round trip). Steps with ``timeout=``, retries
                          after the first failure, ``ctx.gather`` fan-outs and
                          steps of limited queues (``QUEUES``) are always
                          dispatched.
``PREPARED_STATEMENTS``   True. On PostgreSQL, the engine's hot-path statements
                          (a turn's commit, a step's claim and result, lease
                          and history reads) are prepared once per connection
                          and then only bound and executed. Set False behind a
                          connection pooler that cannot carry prepared
                          statements (PgBouncer in transaction mode before
                          1.21, or without ``max_prepared_statements``).
                          Django's own queries are not affected.
``HEALTH_MAX_STEP_WAIT``  5m. The health check fails when a ready step has
                          waited longer for a worker.
``HEALTH_MAX_TIMER_LATENESS`` 1m. ... or when a due wake is this late.
``HEALTH_STALE_AFTER``    5m. A run ``running`` past its lease, or ``suspended``
                          past its wake, by more than this is stale.
``OPENTELEMETRY``         False. Record traces and metrics through the
                          OpenTelemetry API (extra ``otel``).
``RETENTION``             ``{"completed": "30d", "cancelled": "30d", "failed":
                          "90d", "dead": None}``. How long finished runs are
                          kept, per status (None: forever); the statuses given
                          replace these, the others keep them. ``None`` keeps
                          every run forever. A workflow's ``retention={...}``
                          overrides it for its runs.
``RETENTION_ARCHIVE``     None. Dotted path of ``archive(runs)``, called with
                          each batch (JSON) before it is deleted; raising
                          keeps the batch.
``RETENTION_BATCH``       500. Runs deleted per transaction (with their rows).
``RETENTION_INTERVAL``    10m. How often a sweeper looks for expired runs (at
                          once again while it finds full batches).
``QUEUES``                {}. Limits of step queues, by queue name:
                          ``{"payments": {"concurrency": 5, "rate": "20/s",
                          "key_concurrency": 1}}``. A queue named here admits
                          its steps through the database (docs: Flow control).
``HISTORY_CACHE_SIZE``    2000. Suspended runs whose history each process keeps
                          after its turn suspended them, so their next turn
                          here reads only the checkpoints that changed instead
                          of the whole history (the least recently used go
                          first); 0 turns the cache off. Used only by the
                          process that holds the run's next lease; any doubt
                          (another process ran a turn, a lost lease, a cancel,
                          a requeue) reads the whole history.
``HISTORY_CACHE_IDLE``    5m. An entry not used for this long is dropped.
``RESIDENT_WORKFLOWS``    True. A run's workflow that waits on one step, timer,
                          signal or event stays paused in its history cache entry (a greenlet;
                          needs the ``resident`` extra) and its next turn in the
                          same thread resumes it instead of replaying it from
                          the top; without greenlet, or False, every turn replays.
``HISTORY_CACHE_CHECKPOINTS`` 200000. Checkpoints the cache holds in all (its
                          memory bound); a history larger than this is not kept.
``CALLBACK_SECRET``       None. The key that signs ``ctx.wait_for_callback``
                          tokens; None derives one from ``SECRET_KEY`` (changing
                          either invalidates the tokens handed out).
``CALLBACK_URL``          ``"/api/durable/callbacks/{token}/"``. The URL a
                          callback handle gives out; set it to the absolute URL
                          where ``durable_dashboard.urls`` is mounted.
``CODEC``                 None (payloads in clear). Dotted path of a codec class
                          that encodes every payload before it reaches the
                          database: ``"durable.codecs.AESGCMCodec"`` (extra
                          ``encryption``) or your own (docs: Encryption).
``CODEC_KEYS``            {}. The codec's keys, key id to urlsafe-base64 key
                          (32 bytes for AES-GCM); the first encrypts, every
                          key listed decrypts.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings as django_settings
from django.core.exceptions import ImproperlyConfigured

from durable.codecs import config as codecs
from durable.engine import retention
from durable.engine.durations import to_seconds
from durable.engine.plan_queues import QueueLimits, parse_limits
from durable.exceptions import InvalidInput

TRANSPORTS = ("inline", "celery", "manual")
# Django settings the parsed result depends on.
WATCHED_SETTINGS = ("DURABLE", "CELERY_BROKER_URL", "SECRET_KEY")

DEFAULTS: dict[str, Any] = {
    "TRANSPORT": None,
    "LEASE": 30.0,
    "RECONCILE_AFTER": 300.0,
    "MAX_RECOVERY_ATTEMPTS": 5,
    "WORKER_INTERVAL": 1.0,
    "WORKER_THREADS": 4,
    "NOTIFY": True,
    "EMBEDDED_WORKER": True,
    "DEFAULT_NAMESPACE": "default",
    "NAMESPACE_QUEUES": False,
    "STEP_EXECUTION_LEASE": 60.0,
    "STEP_LEASE": 60.0,
    "STEP_REDISPATCH_MAX": None,
    "HEARTBEAT_INTERVAL": 5.0,
    "MAX_PAYLOAD_BYTES": 1024 * 1024,
    "SWEEP_BATCH": 100,
    "SWEEP_INTERVAL": 2.0,
    "SWEEP_QUEUE": "durable.sweeps",
    "FLEET_CHECK": True,
    "EAGER_STEPS": True,
    "FLEET_TTL": 30.0,
    "PREPARED_STATEMENTS": True,
    "HEALTH_MAX_STEP_WAIT": 300.0,
    "HEALTH_MAX_TIMER_LATENESS": 60.0,
    "HEALTH_STALE_AFTER": 300.0,
    "OPENTELEMETRY": False,
    "RETENTION": {"completed": "30d", "cancelled": "30d", "failed": "90d", "dead": None},
    "RETENTION_ARCHIVE": None,
    "RETENTION_BATCH": 500,
    "RETENTION_INTERVAL": 600.0,
    "QUEUES": {},
    "CALLBACK_SECRET": None,
    "CALLBACK_URL": "/api/durable/callbacks/{token}/",
    "HISTORY_CACHE_SIZE": 2000,
    "HISTORY_CACHE_IDLE": 300.0,
    "HISTORY_CACHE_CHECKPOINTS": 200_000,
    "RESIDENT_WORKFLOWS": True,
    "CODEC": None,
    "CODEC_KEYS": {},
}

_DURATIONS = (
    "LEASE",
    "RECONCILE_AFTER",
    "WORKER_INTERVAL",
    "STEP_EXECUTION_LEASE",
    "HEARTBEAT_INTERVAL",
    "FLEET_TTL",
    "SWEEP_INTERVAL",
    "HEALTH_MAX_STEP_WAIT",
    "HEALTH_MAX_TIMER_LATENESS",
    "HEALTH_STALE_AFTER",
    "RETENTION_INTERVAL",
    "HISTORY_CACHE_IDLE",
)
_INTS = (
    "MAX_RECOVERY_ATTEMPTS",
    "WORKER_THREADS",
    "STEP_REDISPATCH_MAX",
    "MAX_PAYLOAD_BYTES",
    "SWEEP_BATCH",
    "RETENTION_BATCH",
    "HISTORY_CACHE_CHECKPOINTS",
)
# Options that may be None (off).
_OPTIONAL = ("STEP_LEASE", "STEP_REDISPATCH_MAX")


@dataclass(frozen=True)
class DurableSettings:
    transport: str
    lease: float
    reconcile_after: float
    max_recovery_attempts: int
    worker_interval: float
    worker_threads: int
    embedded_worker: bool
    default_namespace: str
    step_execution_lease: float
    step_lease: float | None
    step_redispatch_max: int | None
    heartbeat_interval: float
    max_payload_bytes: int
    sweep_batch: int
    sweep_interval: float
    sweep_queue: str
    fleet_check: bool
    eager_steps: bool
    fleet_ttl: float
    prepared_statements: bool
    health_max_step_wait: float = 300.0
    health_max_timer_lateness: float = 60.0
    health_stale_after: float = 300.0
    opentelemetry: bool = False
    retention: dict[str, float | None] = field(default_factory=lambda: dict(retention.DEFAULT_AGES))
    retention_archive: str | None = None
    retention_batch: int = 500
    retention_interval: float = 600.0
    # Limited step queues by name (DURABLE["QUEUES"]); a queue not named here has no limits.
    queues: dict[str, QueueLimits] = field(default_factory=dict)
    # The key of callback tokens (CALLBACK_SECRET, else derived from SECRET_KEY); empty: none configured.
    callback_secret: bytes = b""
    callback_url: str = "/api/durable/callbacks/{token}/"
    notify: bool = True
    history_cache_size: int = 2000
    history_cache_idle: float = 300.0
    history_cache_checkpoints: int = 200_000
    resident_workflows: bool = True
    # Each non-default namespace's work on queues of its own (NAMESPACE_QUEUES; durable.engine.namespaces).
    namespace_queues: bool = False
    # The payload codec (durable.codecs.Codec) built from CODEC and CODEC_KEYS; None: payloads in clear.
    codec: Any = None


def problems(raw: Any) -> tuple[dict[str, Any], list[str]]:
    """Validate a ``DURABLE`` dict: the values as parsed, and every problem found (all of them, not the first)."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        return {}, ["settings.DURABLE must be a dict"]
    found: list[str] = []
    unknown = set(raw) - set(DEFAULTS)
    if unknown:
        found.append(f"settings.DURABLE has unknown option(s) {sorted(unknown)}; known: {sorted(DEFAULTS)}")
    values = {**DEFAULTS, **{k: v for k, v in raw.items() if k in DEFAULTS}}
    for key in (*_DURATIONS, "STEP_LEASE"):
        if key in _OPTIONAL and values[key] is None:
            continue
        try:
            values[key] = to_seconds(values[key])
            if values[key] <= 0:
                raise InvalidInput(f"{key} must be positive" + (" or None" if key in _OPTIONAL else ""))
        except InvalidInput as exc:
            found.append(f"settings.DURABLE: {exc}")
    for key in _INTS:
        value = values[key]
        if key in _OPTIONAL and value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            also = " or None" if key in _OPTIONAL else ""
            found.append(f"settings.DURABLE[{key!r}] must be a positive integer{also}, got {value!r}")
    transport = values["TRANSPORT"]
    if transport is None:
        transport = "celery" if getattr(django_settings, "CELERY_BROKER_URL", None) else "inline"
    if transport not in TRANSPORTS:
        found.append(f"settings.DURABLE['TRANSPORT'] must be one of {TRANSPORTS}, got {transport!r}")
    values["TRANSPORT"] = transport
    for key in ("DEFAULT_NAMESPACE", "SWEEP_QUEUE"):
        if not isinstance(values[key], str) or not values[key]:
            found.append(f"settings.DURABLE[{key!r}] must be a non-empty string")
    for flag in ("NAMESPACE_QUEUES", "RESIDENT_WORKFLOWS"):
        if not isinstance(values[flag], bool):
            found.append(f"settings.DURABLE[{flag!r}] must be True or False, got {values[flag]!r}")
    _retention(values, found)
    values["QUEUES"] = _queues(values["QUEUES"], found)
    _callbacks(values, found)
    size = values["HISTORY_CACHE_SIZE"]
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        found.append(f"settings.DURABLE['HISTORY_CACHE_SIZE'] must be an integer >= 0 (0: off), got {size!r}")
    codecs.build(values, found)
    return values, found


def _callbacks(values: dict[str, Any], found: list[str]) -> None:
    """Check ``CALLBACK_SECRET`` and ``CALLBACK_URL``; replace the secret by the signing key (bytes)."""
    secret = values["CALLBACK_SECRET"]
    if secret is not None and (not isinstance(secret, str) or not secret):
        found.append("settings.DURABLE['CALLBACK_SECRET'] must be a non-empty string or None")
        secret = None
    if secret is None:
        # A key of its own, derived from SECRET_KEY: a token never reveals anything about SECRET_KEY.
        base = str(getattr(django_settings, "SECRET_KEY", "") or "")
        values["CALLBACK_SECRET"] = (
            hmac.new(base.encode(), b"durable.callbacks", hashlib.sha256).digest() if base else b""
        )
    else:
        values["CALLBACK_SECRET"] = secret.encode()
    url = values["CALLBACK_URL"]
    if not isinstance(url, str) or url.count("{token}") != 1:
        found.append(f"settings.DURABLE['CALLBACK_URL'] must be a string with one '{{token}}', got {url!r}")


def _retention(values: dict[str, Any], found: list[str]) -> None:
    """Parse ``RETENTION`` (merged onto the default ages; None: keep everything) and ``RETENTION_ARCHIVE``."""
    raw = values["RETENTION"]
    if raw is None:
        values["RETENTION"] = {str(status): None for status in retention.DEFAULT_AGES}
    else:
        try:
            values["RETENTION"] = retention.merged(
                retention.DEFAULT_AGES, retention.parse_ages(raw, "settings.DURABLE['RETENTION']")
            )
        except InvalidInput as exc:
            found.append(str(exc))
    archive = values["RETENTION_ARCHIVE"]
    if archive is not None and (not isinstance(archive, str) or "." not in archive):
        found.append(
            "settings.DURABLE['RETENTION_ARCHIVE'] must be the dotted path of a callable "
            f"('myapp.archive.write_runs') or None, got {archive!r}"
        )


def _queues(raw: Any, found: list[str]) -> dict[str, QueueLimits]:
    """``DURABLE["QUEUES"]`` parsed: limits by queue name; problems appended to ``found``."""
    if not isinstance(raw, dict):
        found.append(f"settings.DURABLE['QUEUES'] must be a dict of queue name to limits, got {raw!r}")
        return {}
    queues: dict[str, QueueLimits] = {}
    for name, limits in raw.items():
        if not isinstance(name, str) or not name or len(name) > 200:
            found.append(f"settings.DURABLE['QUEUES']: a queue name must be a non-empty string, got {name!r}")
            continue
        try:
            queues[name] = parse_limits(limits, f"settings.DURABLE['QUEUES'][{name!r}]")
        except InvalidInput as exc:
            found.append(str(exc))
    return queues


def parse(raw: Any) -> DurableSettings:
    """Validate a ``DURABLE`` dict (None: all defaults); raises ImproperlyConfigured naming every bad value."""
    values, found = problems(raw)
    if found:
        raise ImproperlyConfigured("; ".join(found))
    transport, namespace = values["TRANSPORT"], values["DEFAULT_NAMESPACE"]
    return DurableSettings(
        transport=transport,
        lease=values["LEASE"],
        reconcile_after=values["RECONCILE_AFTER"],
        max_recovery_attempts=values["MAX_RECOVERY_ATTEMPTS"],
        worker_interval=values["WORKER_INTERVAL"],
        worker_threads=values["WORKER_THREADS"],
        embedded_worker=bool(values["EMBEDDED_WORKER"]),
        default_namespace=namespace,
        step_execution_lease=values["STEP_EXECUTION_LEASE"],
        step_lease=values["STEP_LEASE"],
        step_redispatch_max=values["STEP_REDISPATCH_MAX"],
        heartbeat_interval=values["HEARTBEAT_INTERVAL"],
        max_payload_bytes=values["MAX_PAYLOAD_BYTES"],
        sweep_batch=values["SWEEP_BATCH"],
        sweep_interval=values["SWEEP_INTERVAL"],
        sweep_queue=values["SWEEP_QUEUE"],
        fleet_check=bool(values["FLEET_CHECK"]),
        eager_steps=bool(values["EAGER_STEPS"]),
        fleet_ttl=values["FLEET_TTL"],
        prepared_statements=bool(values["PREPARED_STATEMENTS"]),
        health_max_step_wait=values["HEALTH_MAX_STEP_WAIT"],
        health_max_timer_lateness=values["HEALTH_MAX_TIMER_LATENESS"],
        health_stale_after=values["HEALTH_STALE_AFTER"],
        opentelemetry=bool(values["OPENTELEMETRY"]),
        retention=values["RETENTION"],
        retention_archive=values["RETENTION_ARCHIVE"],
        retention_batch=values["RETENTION_BATCH"],
        retention_interval=values["RETENTION_INTERVAL"],
        queues=values["QUEUES"],
        callback_secret=values["CALLBACK_SECRET"],
        callback_url=values["CALLBACK_URL"],
        notify=bool(values["NOTIFY"]),
        history_cache_size=values["HISTORY_CACHE_SIZE"],
        history_cache_idle=values["HISTORY_CACHE_IDLE"],
        history_cache_checkpoints=values["HISTORY_CACHE_CHECKPOINTS"],
        resident_workflows=values["RESIDENT_WORKFLOWS"],
        namespace_queues=values["NAMESPACE_QUEUES"],
        codec=values["CODEC"],
    )


def parse_django_settings() -> DurableSettings:
    """Parse ``settings.DURABLE`` as it is now; raises ImproperlyConfigured on a bad value."""
    return parse(getattr(django_settings, "DURABLE", None))


def get() -> DurableSettings:
    """The validated DURABLE settings (cached); raises ImproperlyConfigured on a bad value."""
    from durable import runtime

    return runtime.settings()
