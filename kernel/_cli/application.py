"""The application a command is handed as `module:attr`, the way uvicorn, Flask and Celery
take theirs: the module is imported (from the working directory too, as `python -m` would),
and the attribute, a dotted path within it, is returned as it is.

Every way it can go wrong is an `ApplicationNotFound` naming the text it was given and what
to change, never an import traceback: a missing module, a module that fails while importing
(its own error is chained, and named in the message), a missing attribute.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from statekernel import StateError

__all__ = ["ApplicationNotFound", "load_application"]


class ApplicationNotFound(StateError):
    """`module:attr` names nothing that can be loaded."""


def load_application(spec: str) -> Any:
    """The object `spec` (`module:attr`, `attr` a dotted path) names."""
    module_name, colon, attr = spec.partition(":")
    if not colon or not module_name or not attr:
        raise ApplicationNotFound(
            f"{spec!r} is not an application: write it as module:attr (such as "
            f"myapp.team:make_team), the module importable from here and attr a name in it"
        )
    if "" not in sys.path:
        sys.path.insert(0, "")  # the working directory, as `python -m` has it
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and module_name.startswith(error.name):
            raise ApplicationNotFound(
                f"no module {error.name!r} (from {spec!r}): run from the folder that holds "
                f"it, or put that folder on PYTHONPATH"
            ) from error
        raise ApplicationNotFound(
            f"importing {module_name!r} (from {spec!r}) failed: {error}"
        ) from error
    except Exception as error:
        raise ApplicationNotFound(
            f"importing {module_name!r} (from {spec!r}) failed: {type(error).__name__}: {error}"
        ) from error
    found: Any = module
    for part in attr.split("."):
        try:
            found = getattr(found, part)
        except AttributeError:
            raise ApplicationNotFound(
                f"module {module_name!r} has no {attr!r} (from {spec!r}): its names are "
                f"{sorted(n for n in vars(module) if not n.startswith('_'))[:20]}"
            ) from None
    return found
