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
        for workflow, data, run_id in runs:
            durable.start(workflow, data, run_id=run_id, tags=["demo"])
        self.stdout.write(
            f"{len(runs)} example runs started; send the onboarding its signal with\n"
            '  .venv/bin/python manage.py shell -c "import durable; '
            "durable.signal('demo-onboarding-1', 'email_confirmed', 'now')\""
        )
