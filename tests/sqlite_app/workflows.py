"""A workflow that writes several times per run: local steps and a short timer."""

import durable


@durable.workflow(name="sqlite_busy")
def sqlite_busy(ctx, data):
    total = 0
    for i in range(3):
        total += ctx.local_step(f"add{i}", lambda a, b: a + b, total, i)
    ctx.sleep(0.05)
    return total
