"""The fault kinds of the chaos suite (each a method of :class:`tests.chaos.faults.Faults`; see docs/chaos.md)."""

KILLS = ("kill_celery_worker", "kill_beat", "kill_durable_worker")
GLOBAL = ("pg_restart", "redis_flushall", "redis_restart")
MESSAGES = ("duplicate_delivery", "late_result", "sweeper_race", "cancel_race", "poison_step")
KINDS = (*KILLS, *GLOBAL, *MESSAGES)
