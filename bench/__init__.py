"""Benchmarks of django-durable against DBOS Transact and bare Celery (not part of the test suite).

Run everything with ``./bench/run``; see the README's "Benchmarks" section.
"""
