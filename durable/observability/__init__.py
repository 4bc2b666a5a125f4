"""Observability: the state of the system at a glance (health, stale runs, metrics, traces).

* :mod:`durable.observability.snapshot` reads what the database says now:
  runs per status, pending steps and live workers per queue, overdue timers
  and stale runs.
* :mod:`durable.observability.health` judges a snapshot against the
  ``HEALTH_*`` thresholds (``GET /api/durable/health/``, ``manage.py durable_health``).
* :mod:`durable.observability.prometheus` writes a snapshot in the Prometheus
  text format (``GET /api/durable/metrics``; extra ``prometheus``).
* :mod:`durable.observability.otel` is the engine's observer on the
  OpenTelemetry API (``DURABLE["OPENTELEMETRY"]``; extra ``otel``).

Nothing here is imported by the engine.
"""
