"""``manage.py durable_demo``: a demo superuser and a few example runs (idempotent)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand

import durable


class Command(BaseCommand):
    help = "Create the demo superuser (admin / admin) and start a few example runs."

    def handle(self, *args: Any, **options: Any) -> None:
        User = get_user_model()
        if not User.objects.filter(username="admin").exists():
            User.objects.create_superuser("admin", "admin@example.com", "admin")
            self.stdout.write("demo superuser: admin / admin")
        runs = [
            (
                "order",
                {"order_id": "a100", "amount": 42.0, "items": ["book", "pen"], "address": "1 Main St"},
                "demo-order-1",
            ),
            ("order", {"order_id": "a101", "amount": 9.5, "items": ["mug"], "address": ""}, "demo-order-2"),
            ("onboarding", {"email": "ada@example.com"}, "demo-onboarding-1"),
            ("countdown", 5, "demo-countdown-1"),
            (
                "trip",
                {"destination": "Lisbon", "nights": 3, "travellers": ["ada", "alan"], "card": "4242424242424242"},
                "demo-trip-1",
            ),
            (
                "trip",
                {"destination": "Oslo", "nights": 2, "travellers": ["grace"], "card": "4000000000000002"},
                "demo-trip-2",
            ),
        ]
        new = [(workflow, data, run_id) for workflow, data, run_id in runs if not _exists(run_id)]
        for workflow, data, run_id in new:
            durable.start(workflow, data, run_id=run_id, tags=["demo"])
        if not new:
            self.stdout.write(f"nothing new started: the {len(runs)} example runs exist already")
            return
        existing = len(runs) - len(new)
        self.stdout.write(
            f"{len(new)} example runs started"
            + (f" ({existing} existed already)" if existing else "")
            + "; send the onboarding its signal with\n"
            '  .venv/bin/python manage.py shell -c "import durable; '
            "durable.signal('demo-onboarding-1', 'email_confirmed', 'now')\""
        )


def _exists(run_id: str) -> bool:
    try:
        durable.get_run(run_id)
    except durable.RunNotFound:
        return False
    return True
