"""The bench app: installing it makes durable auto-discover ``bench/workflows.py``.

With ``BENCH_OTEL`` (``./bench/run --otel``) it installs the OpenTelemetry SDK in
the process: spans go through a batch processor to an exporter that drops
them, metrics to a reader nobody collects (what a deployment pays for
recording, without its network).
"""

import os

from django.apps import AppConfig


class BenchConfig(AppConfig):
    name = "bench"
    label = "bench"
    verbose_name = "django-durable benchmarks"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        if os.environ.get("BENCH_OTEL"):
            _install_otel_sdk()
        if os.environ.get("BENCH_QUEUES"):  # a Celery worker of python -m bench.queues
            from bench.queues import register

            register()


def _install_otel_sdk() -> None:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Discard(SpanExporter):
        def export(self, spans):  # type: ignore[no-untyped-def]
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Discard()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
