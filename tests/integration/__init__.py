"""Integration tests on real Celery workers, Redis and PostgreSQL (see conftest.py)."""
