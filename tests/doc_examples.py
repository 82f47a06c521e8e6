"""The modules of docs/examples/ that tests import: each by its file's path, as the module
of its own name, without docs/examples on `sys.path` (where the examples' names, `team`,
`history`, would shadow other modules)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"


def example(name: str) -> ModuleType:
    """docs/examples/NAME.py, imported once as the module NAME."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
        assert spec is not None and spec.loader is not None, f"no {EXAMPLES / name}.py"
        module = sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules[name]
