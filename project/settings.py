"""Example project settings, read from the environment with django-environ.

With no environment at all this runs the embedded default: SQLite file
``db.sqlite3`` and in-process execution. Set ``DATABASE_URL`` (PostgreSQL) and
``CELERY_BROKER_URL`` (Redis) to run distributed.
"""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")

# Off unless asked for: a traceback page is never what an API client or a user should get.
# ./scripts/run and docker-compose.yml turn it on for the local demo.
DEBUG = env.bool("DEBUG", default=False)
SECRET_KEY = env("SECRET_KEY", default="dev-only-insecure-key-change-me")
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "durable",
    "durable_dashboard",
    "project",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"
WSGI_APPLICATION = "project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several threads write (web requests, the embedded worker): wait for the lock
    # instead of failing, take it up front, and let readers run beside a writer.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 30,
        "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

# Celery (distributed mode). Unset: everything runs in-process.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=None)
# Keep a worker's database connection across tasks (Celery's Django fixup otherwise closes it
# after every task, and each step then pays for a new connection).
CELERY_DB_REUSE_MAX = env.int("CELERY_DB_REUSE_MAX", default=1000)

DURABLE = {"TRANSPORT": env("DURABLE_TRANSPORT", default=None)}
# Lost-dispatch recovery window for dispatched steps (e.g. "30s"); the engine's default (60s) unless set.
if env("DURABLE_STEP_LEASE", default=None):
    DURABLE["STEP_LEASE"] = env("DURABLE_STEP_LEASE")

# REST API (durable_dashboard, mounted at /api/durable/). Token or session authentication;
# anonymous requests are refused; each action needs its own permission.
# The dashboard's API sets its own DRF policy (authentication, parsers, throttling, errors,
# schema), so the project needs no REST_FRAMEWORK or SPECTACULAR_SETTINGS for it.

DURABLE_DASHBOARD = {
    "REQUIRE_NAMESPACE_GRANT": env.bool("DURABLE_REQUIRE_NAMESPACE_GRANT", default=False),
    "THROTTLE_RATE": env("DURABLE_API_THROTTLE_RATE", default="1000/minute") or None,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"durable": {"handlers": ["console"], "level": env("DURABLE_LOG_LEVEL", default="INFO")}},
}
