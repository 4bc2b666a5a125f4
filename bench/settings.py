"""Django settings of the benchmark processes (driver, Celery workers, durable_worker).

``DATABASE_URL`` is the benchmark's own PostgreSQL database (``./bench/run`` sets
it from ``BENCH_DATABASE_URL``, default ``postgres://postgres@127.0.0.1:5432/bench``,
and drops/re-creates that database on every run). ``CELERY_BROKER_URL`` is a
dedicated Redis database (default db 11). ``BENCH_TRANSPORT`` picks durable's
transport for the process; ``BENCH_CONN_MAX_AGE`` Django's persistent
connections (default 600 s, as a tuned deployment would; ``0`` is Django's
default of one connection per request/task).
"""

import json
import os

import environ

env = environ.Env()

SECRET_KEY = "bench-only"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["durable", "bench.apps.BenchConfig"]
DATABASES = {"default": env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/bench")}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("BENCH_CONN_MAX_AGE", default=600)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="redis://127.0.0.1:6379/11")
# durable's configure(app) sets CELERY_DB_REUSE_MAX (100) when the settings do not; this
# overrides it (an experiment knob).
if os.environ.get("BENCH_CELERY_DB_REUSE_MAX"):
    CELERY_DB_REUSE_MAX = int(os.environ["BENCH_CELERY_DB_REUSE_MAX"])

DURABLE = {"TRANSPORT": env("BENCH_TRANSPORT", default="inline"), "EMBEDDED_WORKER": False}
if os.environ.get("BENCH_NOTIFY") == "0":  # python -m bench.pickup, NOTIFY off
    DURABLE["NOTIFY"] = False
if os.environ.get("BENCH_OTEL"):  # ./bench/run --otel
    DURABLE["OPENTELEMETRY"] = True
if os.environ.get("BENCH_CODEC"):  # python -m bench.codec: AES-GCM on every payload (a fixed bench-only key)
    DURABLE["CODEC"] = "durable.codecs.AESGCMCodec"
    DURABLE["CODEC_KEYS"] = {"bench": "YmVuY2gtb25seS1rZXktbm90LWEtc2VjcmV0LTMyYiE="}
for key in ("WORKER_THREADS", "SWEEP_BATCH"):
    if os.environ.get(f"BENCH_{key}"):
        DURABLE[key] = int(os.environ[f"BENCH_{key}"])
# More DURABLE options as JSON (bench/recovery.py: short leases and sweep intervals).
DURABLE.update(json.loads(os.environ.get("BENCH_DURABLE") or "{}"))

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "WARNING"},
}
