"""The public API: what `gatekeeper/__init__.py` exports, and one exception tree behind it."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import gatekeeper
from gatekeeper import errors


def _all_modules() -> list[str]:
    found = pkgutil.walk_packages(gatekeeper.__path__, "gatekeeper.")
    return [info.name for info in found if not info.name.endswith("__main__")]  # __main__ runs the CLI


def test_every_exported_name_exists():
    assert sorted(n for n in gatekeeper.__all__ if not hasattr(gatekeeper, n)) == []
    assert len(set(gatekeeper.__all__)) == len(gatekeeper.__all__)


def test_every_error_is_in_the_one_tree_and_exported():
    for name in _all_modules():
        importlib.import_module(name)  # every error class defined anywhere in the package is seen
    found, todo = set(), [errors.GatekeeperError]
    while todo:
        cls = todo.pop()
        found.add(cls)
        todo += cls.__subclasses__()
    public = {cls for cls in found if not cls.__name__.startswith("_")}
    assert {cls.__module__ for cls in public} == {"gatekeeper.errors"}, "errors live in gatekeeper/errors.py"
    assert {cls.__name__ for cls in public} <= set(gatekeeper.__all__)
    defined = {n for n, obj in vars(errors).items() if inspect.isclass(obj) and issubclass(obj, Exception)}
    assert defined <= set(gatekeeper.__all__)


def test_the_error_tree_drawn_in_errors_py_names_every_error():
    defined = {n for n, obj in vars(errors).items() if inspect.isclass(obj) and issubclass(obj, Exception)}
    drawn = {"GatekeeperError", *re.findall(r"── (\w+)", errors.__doc__ or "")}
    assert drawn == defined


def test_errors_carry_their_details_from_construction():
    from gatekeeper import Tier, ToolChoiceBlocked

    blocked = ToolChoiceBlocked("execute_command", Tier.LARGE, Tier.SMALL, "measured")
    assert (blocked.tool, blocked.required, blocked.tier, blocked.source) == (
        "execute_command",
        Tier.LARGE,
        Tier.SMALL,
        "measured",
    )
    assert "'execute_command'" in str(blocked) and "'large'" in str(blocked)
