"""Entities: keyed durable state changed by named operations, one at a time per key.

``@durable.entity(name, initial=...)`` declares an entity on a class or on a
dict of handlers; either becomes an :class:`EntityDef` here, whose operations
all have one shape, ``apply(state, arg) -> (new_state, result)``, so the
stores and the plan (:mod:`durable.engine.plan_entities`) never see the
difference:

* **class form**: each public method is an operation. For every operation the
  class is instantiated with no arguments, ``self.state`` is set to (a deep
  copy of) the entity's state, the method is called with the argument (or
  without one, if it takes none), and ``self.state`` afterwards is the new
  state (so it may be reassigned: an integer counter works).
* **dict form**: ``{"op": handler}`` where ``handler(state, arg)`` changes the
  state (a dict or a list) in place and returns the result; the state object
  itself cannot be replaced, so the initial state must be a dict or a list.

Pure: no Django, no database. Names are checked at declaration
(:class:`~durable.ConfigurationError`), keys and operation names at each call
(:class:`~durable.InvalidInput`, :class:`~durable.EntityNotFound`).
"""

from __future__ import annotations

import copy
import inspect
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from durable.engine.serialization import to_json
from durable.engine.singletons import text_key
from durable.exceptions import ConfigurationError, EntityNotFound, InvalidInput

#: How many applied operations an entity's op log keeps per key (the newest; older rows are
#: deleted in the transaction that applies a new one). It is also the window in which a
#: repeated op id is recognised and answered from the log instead of being applied again.
HISTORY = 1000
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:\-]{0,99}$")
_OP = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-]{0,98}$")

Apply = Callable[[Any, Any], tuple[Any, Any]]


@dataclass(frozen=True)
class EntityOpDef:
    """One operation: ``apply(state, arg) -> (new_state, result)``; ``takes_arg``: the handler accepts an argument."""

    apply: Apply
    takes_arg: bool


@dataclass(frozen=True)
class EntityDef:
    """A declared entity: its operations by name, its initial state and its op log bound."""

    name: str
    ops: Mapping[str, EntityOpDef]
    initial: Any
    history: int = HISTORY
    source: str = ""

    def initial_state(self) -> Any:
        """The state of a key never operated on: ``initial`` (called if it is a callable), as JSON."""
        value = self.initial() if callable(self.initial) else copy.deepcopy(self.initial)
        return to_json(value, f"initial state of entity {self.name!r}")

    def op(self, op: Any, arg: Any) -> EntityOpDef:
        """Operation ``op`` (:class:`~durable.EntityNotFound` if the entity has none of that name)."""
        if not isinstance(op, str) or op not in self.ops:
            names = ", ".join(sorted(self.ops))
            raise EntityNotFound(f"entity {self.name!r} has no operation {op!r} (it has: {names})")
        found = self.ops[op]
        if arg is not None and not found.takes_arg:
            raise InvalidInput(f"operation {op!r} of entity {self.name!r} takes no argument, got {arg!r}")
        return found


def check_entity_name(name: Any) -> str:
    """An entity name: letters, digits, ``_ . : -``, at most 100 characters, not starting with a digit."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ConfigurationError(
            f"entity name {name!r} is invalid: use letters, digits, '_', '.', ':' or '-' "
            "(at most 100 characters, not starting with a digit)"
        )
    return name


def check_key(name: str, key: Any) -> str:
    """An entity key: a string or an integer, 1 to 200 characters once a string."""
    return text_key(key, f"key of entity {name!r}")


def entity_def(name: str, target: Any, initial: Any, history: int) -> EntityDef:
    """The definition of entity ``name`` declared on ``target`` (a class or a dict of handlers)."""
    check_entity_name(name)
    if isinstance(history, bool) or not isinstance(history, int) or history < 1:
        raise ConfigurationError(f"entity {name!r}: history must be a positive integer, got {history!r}")
    if isinstance(target, type):
        ops, source = _class_ops(name, target), f"{target.__module__}.{target.__qualname__}"
    elif isinstance(target, Mapping):
        ops, source = _dict_ops(name, target), ", ".join(_source(fn) for fn in target.values())
    else:
        raise ConfigurationError(f"@durable.entity({name!r}) decorates a class or a dict of handlers, not {target!r}")
    if not ops:
        raise ConfigurationError(f"entity {name!r} declares no operation")
    found = EntityDef(name=name, ops=ops, initial=initial, history=history, source=source)
    try:
        first = found.initial_state()
    except InvalidInput as exc:
        raise ConfigurationError(str(exc)) from None
    if isinstance(target, Mapping) and not isinstance(first, (dict, list)):
        raise ConfigurationError(
            f"entity {name!r}: dict handlers change the state in place, so initial must be a dict or a list "
            f"(got {first!r}); declare the entity on a class to keep another value in self.state"
        )
    return found


def _source(fn: Any) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _takes_arg(fn: Callable[..., Any], skip: int) -> bool:
    positional = [
        p
        for p in inspect.signature(fn).parameters.values()
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
    ]
    return len(positional) > skip or any(p.kind is p.VAR_POSITIONAL for p in positional)


def _check_op_name(entity: str, op: Any) -> str:
    if not isinstance(op, str) or not _OP.match(op):
        raise ConfigurationError(
            f"entity {entity!r}: operation name {op!r} is invalid (letters, digits, '_', '.' or '-', at most 99)"
        )
    return op


def _class_ops(name: str, cls: type) -> dict[str, EntityOpDef]:
    try:
        inspect.signature(cls).bind()
    except TypeError:
        what = f"entity {name!r}: class {cls.__qualname__} must be constructible with no arguments"
        raise ConfigurationError(what) from None
    except ValueError:  # no signature to inspect (a builtin base): constructed as is
        pass
    ops: dict[str, EntityOpDef] = {}
    for attr in dir(cls):
        method = inspect.getattr_static(cls, attr)
        if attr.startswith("_") or attr == "state" or not inspect.isfunction(method):
            continue
        ops[_check_op_name(name, attr)] = EntityOpDef(_method_apply(cls, attr), _takes_arg(method, 1))
    return ops


def _method_apply(cls: type, attr: str) -> Apply:
    takes_arg = _takes_arg(inspect.getattr_static(cls, attr), 1)

    def apply(state: Any, arg: Any) -> tuple[Any, Any]:
        obj = cls()
        obj.state = state
        method = getattr(obj, attr)
        result = method(arg) if takes_arg else method()
        return obj.state, result

    return apply


def _dict_ops(name: str, handlers: Mapping[Any, Any]) -> dict[str, EntityOpDef]:
    ops: dict[str, EntityOpDef] = {}
    for op, fn in handlers.items():
        if not callable(fn):
            raise ConfigurationError(f"entity {name!r}: handler {op!r} is not callable")
        ops[_check_op_name(name, op)] = EntityOpDef(_handler_apply(fn, _takes_arg(fn, 1)), _takes_arg(fn, 1))
    return ops


def _handler_apply(fn: Callable[..., Any], takes_arg: bool) -> Apply:
    def apply(state: Any, arg: Any) -> tuple[Any, Any]:
        result = fn(state, arg) if takes_arg else fn(state)
        return state, result

    return apply
