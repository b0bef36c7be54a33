"""Argument checks shared by every module: one place, one wording.

Every public function of ``course_lib`` checks its arguments with these helpers, so a learner who
passes a string where a number belongs, a negative size or an unknown name gets the same kind of
message everywhere: a ``TypeError`` for the wrong kind of value, a ``ValueError`` for a value out
of range, each naming the argument and what it accepts::

    >>> positive("lr", "0.1")
    Traceback (most recent call last):
    TypeError: lr must be a number > 0, got str '0.1'

Names (optimizers, precisions, kernels, ...) are matched case-insensitively and with surrounding
spaces ignored, everywhere. This module imports only the standard library.
"""

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "integer",
    "positive_int",
    "nonnegative_int",
    "number",
    "positive",
    "nonnegative",
    "fraction",
    "seconds",
    "choice",
    "boolean",
    "function",
    "instance",
    "text",
    "path",
    "int_list",
    "optional",
]


def _shown(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:57] + '...'}"


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def integer(name: str, value: Any, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as an int in [minimum, maximum]; TypeError for non-integers (bools and floats too)."""
    limits = _range_text(minimum, maximum)
    if not _is_int(value):
        raise TypeError(f"{name} must be an int{limits}, got {_shown(value)}")
    value = int(value)
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ValueError(f"{name} must be an int{limits}, got {value}")
    return value


def positive_int(name: str, value: Any) -> int:
    """An int >= 1 (a size, a count)."""
    return integer(name, value, minimum=1)


def nonnegative_int(name: str, value: Any) -> int:
    """An int >= 0."""
    return integer(name, value, minimum=0)


def _range_text(minimum: float | None, maximum: float | None, open_low: bool = False, open_high: bool = False) -> str:
    low = f"{'>' if open_low else '>='} {minimum:g}" if minimum is not None else ""
    high = f"{'<' if open_high else '<='} {maximum:g}" if maximum is not None else ""
    if low and high:
        return f" {low} and {high}"
    return f" {low or high}" if (low or high) else ""


def number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    open_low: bool = False,
    open_high: bool = False,
    allow_inf: bool = False,
) -> float:
    """``value`` as a float in the given range. Strings, bools and None are a TypeError; NaN and
    (unless ``allow_inf``) infinity are a ValueError."""
    limits = _range_text(minimum, maximum, open_low, open_high)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number{limits}, got {_shown(value)}")
    value = float(value)
    if math.isnan(value) or (math.isinf(value) and not allow_inf):
        raise ValueError(f"{name} must be a finite number{limits}, got {value!r}")
    too_low = minimum is not None and (value <= minimum if open_low else value < minimum)
    too_high = maximum is not None and (value >= maximum if open_high else value > maximum)
    if too_low or too_high:
        raise ValueError(f"{name} must be a number{limits}, got {value!r}")
    return value


def positive(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """A number > 0."""
    return number(name, value, minimum=0, open_low=True, allow_inf=allow_inf)


def nonnegative(name: str, value: Any, *, allow_inf: bool = False) -> float:
    """A number >= 0."""
    return number(name, value, minimum=0, allow_inf=allow_inf)


def fraction(name: str, value: Any, *, allow_zero: bool = False, allow_one: bool = False) -> float:
    """A number in (0, 1), with either end included on request."""
    return number(name, value, minimum=0, maximum=1, open_low=not allow_zero, open_high=not allow_one)


def seconds(name: str, value: Any) -> float:
    """A positive, finite number of seconds (a timeout, a duration)."""
    return number(name, value, minimum=0, open_low=True)


def choice(name: str, value: Any, accepted: Iterable[str], *, aliases: Mapping[str, str] | None = None) -> str:
    """One of ``accepted``, matched case-insensitively (``aliases`` maps other spellings onto them).

    Returns the accepted spelling. TypeError for a non-string, ValueError listing the accepted
    values for an unknown one.
    """
    accepted = tuple(accepted)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, one of {accepted}; got {_shown(value)}")
    key = value.strip().lower()
    by_lower = {a.lower(): a for a in accepted}
    if key in by_lower:
        return by_lower[key]
    for alias, target in (aliases or {}).items():
        if alias.lower() == key:
            return target
    raise ValueError(f"{name} {value!r} is not known; accepted values are {accepted}")


def boolean(name: str, value: Any) -> bool:
    """True or False (not 0/1, not a string)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {_shown(value)}")
    return value


def function(name: str, value: Any) -> Callable:
    """A callable."""
    if not callable(value):
        raise TypeError(f"{name} must be callable, got {_shown(value)}")
    return value


def instance(name: str, value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    """An instance of ``kind`` (a class or a tuple of classes); ``what`` says it in words ("a torch.nn.Module")."""
    if not isinstance(kind, (type, tuple)):
        raise TypeError(f"kind must be a class or a tuple of classes, got {_shown(kind)}")
    if not isinstance(value, kind):
        raise TypeError(f"{name} must be {what}, got {_shown(value)}")
    return value


def text(name: str, value: Any) -> str:
    """A string."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a string, got {_shown(value)}")
    return value


def path(name: str, value: Any) -> str | os.PathLike:
    """A file or folder path: a string or an ``os.PathLike`` such as ``pathlib.Path``."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (a string or pathlib.Path), got {_shown(value)}")
    return value


def int_list(name: str, values: Any, *, minimum: int = 1) -> list[int]:
    """A non-empty list (or other iterable, not a string) of ints >= ``minimum``."""
    if isinstance(values, (str, bytes)) or _is_int(values) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list of ints >= {minimum}, got {_shown(values)}")
    out = list(values)
    if not out:
        raise ValueError(f"{name} must not be empty")
    return [integer(f"every entry of {name}", v, minimum=minimum) for v in out]


def optional(check: Callable[..., Any], name: str, value: Any, *args: Any, **kwargs: Any) -> Any:
    """``None`` passes through; anything else goes to ``check(name, value, ...)``."""
    return None if value is None else check(name, value, *args, **kwargs)
