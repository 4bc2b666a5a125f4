"""A workflow that writes several times per run: local steps and a short timer."""

import durable


@durable.workflow(name="sqlite_busy")
def sqlite_busy(ctx, data):
    total = 0
    for i in range(3):
        total += ctx.local_step(f"add{i}", lambda a, b: a + b, total, i)
    ctx.sleep(0.05)
    return total


@durable.workflow(name="sqlite_serial", singleton=durable.Singleton(key="key"))
def sqlite_serial(ctx, data):
    ctx.local_step("body", lambda: data["key"])
    ctx.sleep(0.02)  # a real timer: the run holds its slot while it sleeps
    return data["key"]
