"""Argument checks shared by the layers, models, training and export, with one message format.

Every error names the argument and the received value:
"`name` must be ... Received: name=value".
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Collection, Mapping
from typing import Any


def is_static_size(*sizes: Any) -> bool:
    """Whether every size is a Python or NumPy integer (not a run-time scalar tensor)."""
    return all(isinstance(size, numbers.Integral) for size in sizes)


def check_choice(name: str, value: Any, choices: Collection) -> Any:
    """Returns `value` if it is one of `choices`, else raises ValueError."""
    if value not in choices:
        raise ValueError(f"`{name}` must be one of {tuple(choices)}. Received: {name}={value!r}")
    return value


def check_positive_int(name: str, value: Any) -> int:
    """Returns `value` as an int if it is an integer >= 1 (not a bool), else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"`{name}` must be a positive int. Received: {name}={value!r}")
    return int(value)


def check_rate(name: str, value: Any) -> float:
    """Returns `value` if it is a number in [0, 1), else raises ValueError."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        raise ValueError(f"`{name}` must be in [0, 1). Received: {name}={value!r}")
    return value


def check_number(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Returns `value` as a float if it is a finite real number in the given range.

    Args:
        name: the argument's name, as the user typed it (e.g. "learning_rate"
            or "--learning-rate").
        value: the value to check.
        low: the lower bound. Default None: none.
        high: the upper bound. Default None: none.
        low_open: whether `low` itself is excluded. Default False.
        high_open: whether `high` itself is excluded. Default False.

    Returns:
        `value` as a float.

    Raises:
        ValueError: naming the argument and the value, for a bool, a
            non-number, NaN, an infinity or a value out of range.

    Example:
        >>> check_number("learning_rate", 3e-3, low=0, low_open=True)
        0.003
    """
    valid = not isinstance(value, bool) and isinstance(value, numbers.Real)
    valid = valid and math.isfinite(value)
    if valid and low is not None:
        valid = value > low if low_open else value >= low
    if valid and high is not None:
        valid = value < high if high_open else value <= high
    if not valid:
        if low is not None and high is not None:
            interval = f"in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        elif low is not None:
            interval = f"{'>' if low_open else '>='} {low}"
        elif high is not None:
            interval = f"{'<' if high_open else '<='} {high}"
        else:
            interval = ""
        raise ValueError(
            f"`{name}` must be a finite number {interval}".rstrip()
            + f". Received: {name}={value!r}"
        )
    return float(value)


def check_bool(name: str, value: Any) -> bool:
    """Returns `value` if it is a bool, else raises ValueError."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")
    return value


def check_layer_arguments(
    name: str,
    value: Any,
    layer: Callable,
    fixed: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> dict:
    """`value` as a dict of constructor arguments of `layer` that its owner lets a user set.

    A builder or a parent layer passes them on as given; `fixed` are the
    arguments it sets itself (and ``name`` and ``dtype`` always), which
    `value` may not hold. The arguments are checked by constructing
    ``layer(**defaults, **value, **fixed)`` (no weights are made), so a bad
    or unknown one is refused here, naming `name`.

    Args:
        name: the argument holding the dict, for messages.
        value: None (no arguments) or a dict.
        layer: the layer class.
        fixed: the arguments its owner sets, with their values. Default None.
        defaults: the owner's values of the others, overridden by `value`.
            Default None.

    Returns:
        A copy of `value` ({} for None).

    Example:
        >>> import keras
        >>> check_layer_arguments("head", {"units": 4}, keras.layers.Dense)
        {'units': 4}
    """
    if value is None:
        return {}
    owned = {*(fixed or {}), "name", "dtype"}
    if not isinstance(value, dict) or set(value) & owned:
        raise ValueError(
            f"`{name}` must be None or a dict of {layer.__name__} arguments other than "
            f"{', '.join(sorted(owned))}. Received: {name}={value!r}"
        )
    try:
        layer(**{**(defaults or {}), **value, **(fixed or {})})
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"`{name}` has a bad argument ({error}). Received: {name}={value!r}"
        ) from None
    return dict(value)


def check_optional_size(name: str, value) -> int | None:
    """`value` if it is None or a positive int, else ValueError naming `name`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"`{name}` must be None or a positive int. Received: {name}={value!r}")
    return value


# Items of a set shown in a message; the rest are counted.
MAX_LISTED = 8


def listed(values: Collection, limit: int = MAX_LISTED) -> str:
    """A set for a message: its first `limit` items, then how many more (a line stays short).

    Example:
        >>> listed(["a", "b"]), listed(range(100), limit=3)
        ("['a', 'b']", '[0, 1, 2, ... and 97 more]')
    """
    values = list(values)
    if len(values) <= limit:
        return repr(values)
    shown = repr(values[:limit])[:-1]
    return f"{shown}, ... and {len(values) - limit:,} more]"
