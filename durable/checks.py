"""System checks of django-durable (``manage.py check``), each with a stable id.

``durable.E001``: ``settings.DURABLE`` does not parse (an unknown option, a bad value).
``durable.W001``: a setting turns a lost message into a stuck run (``STEP_LEASE=None``).
``durable.W020``: with Celery, the sweeps are sent to a queue that work goes to too, so they
would wait behind its backlog (and recovery with them).
``durable.W030``: ``RETENTION`` keeps every finished run forever, so the tables grow without bound.
``durable.E030``: ``RETENTION_ARCHIVE`` names nothing callable, so every retention batch would
fail its archive and nothing would ever be deleted.
"""

from __future__ import annotations

from django.core import checks


def check_settings(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """``durable.E001``, once per problem, when ``settings.DURABLE`` does not parse (all of them at once)."""
    from django.conf import settings

    from durable import conf

    _, found = conf.problems(getattr(settings, "DURABLE", None))
    return [
        checks.Error(problem, hint="See the settings reference (docs/settings.md).", id="durable.E001")
        for problem in found
    ]


def check_sweep_queue(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """``durable.W020`` when, with Celery, the sweep task shares a queue with turns or steps.

    Redis queues are first in, first out: a sweep sent behind a backlog of work
    runs only after it, so orphaned runs and lost steps wait that long too.
    Looks at ``SWEEP_QUEUE`` and at the queue of the Celery app's
    ``durable-sweep`` beat entry (when the app is loaded in this process).
    """
    from django.core.exceptions import ImproperlyConfigured

    from durable import conf, runtime
    from durable.transports import celery

    try:
        current = conf.parse_django_settings()
    except ImproperlyConfigured:
        return []  # durable.E001 says why
    if current.transport != "celery":
        return []
    work = {celery.DEFAULT_QUEUE, *(s.route for s in runtime.registry.steps() if s.route)}
    sent_to = {current.sweep_queue}
    beat_queue = celery.beat_sweep_queue()
    if beat_queue is not None:
        sent_to.add(beat_queue)
    shared = sorted(sent_to & work)
    if not shared:
        return []
    return [
        checks.Warning(
            f"durable's sweeps are sent to queue(s) {shared}, which turns or steps use too: a backlog of "
            "work there delays every sweep, and the recovery of runs whose worker died with it",
            hint=(
                "Give the sweeps their own queue (DURABLE['SWEEP_QUEUE'], default 'durable.sweeps'; keep the "
                "'durable-sweep' beat entry configure(app) adds) and run a worker that consumes it, e.g. "
                "`celery -A proj worker -Q durable,durable.sweeps`."
            ),
            id="durable.W020",
        )
    ]


def check_recovery(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """``durable.W001`` when the settings turn a lost message into a stuck run.

    ``STEP_LEASE=None`` turns lost-dispatch recovery off: a step message the
    broker loses before a worker takes it (a Redis restart or flush) leaves
    its run waiting until an operator redispatches it.
    """
    from django.conf import settings

    from durable import conf

    values, found = conf.problems(getattr(settings, "DURABLE", None))
    if found or values["STEP_LEASE"] is not None:
        return []
    return [
        checks.Warning(
            "settings.DURABLE['STEP_LEASE'] is None: a step message lost before a worker takes it "
            "(a broker restart or flush) leaves its run waiting until someone redispatches it.",
            hint="Remove STEP_LEASE (default 60s) or set it to how long a step may wait in its queue.",
            id="durable.W001",
        )
    ]


def check_retention_archive(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """``durable.E030`` when ``RETENTION_ARCHIVE`` cannot be imported or is not callable.

    Retention deletes nothing whose archive failed, so a wrong path would keep
    every run forever while logging an error each pass.
    """
    from django.conf import settings
    from django.utils.module_loading import import_string

    from durable import conf

    values, found = conf.problems(getattr(settings, "DURABLE", None))
    path = values.get("RETENTION_ARCHIVE")
    if found or not path:
        return []
    try:
        target = import_string(path)
    except ImportError as exc:
        problem = f"cannot be imported ({exc})"
    else:
        if callable(target):
            return []
        problem = f"is a {type(target).__name__}, not a callable"
    return [
        checks.Error(
            f"settings.DURABLE['RETENTION_ARCHIVE'] {path!r} {problem}: retention would archive and delete nothing",
            hint="Give the dotted path of a function archive(runs) taking a list of runs as JSON, or remove it.",
            id="durable.E030",
        )
    ]


def check_retention(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    """``durable.W030`` when ``RETENTION`` keeps every status forever (``None``, or None for each status).

    Nothing then ever deletes a run: ``durable_run`` and ``durable_checkpoint``
    grow with every run, and with them the indexes, the backups and the lists.
    """
    from django.conf import settings

    from durable import conf

    values, found = conf.problems(getattr(settings, "DURABLE", None))
    if found or any(age is not None for age in values["RETENTION"].values()):
        return []
    return [
        checks.Warning(
            "settings.DURABLE['RETENTION'] keeps every finished run forever: durable_run and durable_checkpoint "
            "grow with every run (and their indexes and backups with them).",
            hint="Give the statuses an age (the default: completed and cancelled 30d, failed 90d), archive with "
            "RETENTION_ARCHIVE first if you must keep them, or silence durable.W030 if this is intended.",
            id="durable.W030",
        )
    ]
