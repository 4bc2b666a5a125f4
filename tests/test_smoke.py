import pytest

import durable
from durable.testing import run_until_settled
from tests import workflows as w


@pytest.mark.django_db
def test_three_steps_complete():
    w.reset()
    run_id = durable.start("t_three_steps", 1)
    run = run_until_settled(run_id)
    assert run.status == "completed"
    assert run.output == 14
    assert w.calls["t_add"] == 2
