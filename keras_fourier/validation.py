"""Argument checks shared by the layers and models, with one message format.

Every error names the argument and the received value:
"`name` must be ... Received: name=value".
"""

from __future__ import annotations

import numbers
from collections.abc import Collection
from typing import Any


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
