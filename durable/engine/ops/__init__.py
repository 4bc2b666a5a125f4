"""The ``ctx`` operations, by family: steps, waits, children and gather, sagas, values.

Each family is a mixin over :class:`~durable.engine.ops.base.OpsBase`;
:class:`durable.engine.context.WorkflowContext` composes them. An operation
talks only to the turn's :class:`~durable.engine.history.History` (positions,
replay, records) and to a :class:`~durable.engine.ops.port.TurnPort` (what it
may ask of the turn); it never imports the turn.
"""
