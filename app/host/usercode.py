"""Importing the user's own code into this process: a reward function, a tool file, an environment class.

Owns: turning "path/to/file.py" or "package.module" into a module, with one-line errors that name the file and
the fix. The code is trusted as the user's own (it runs with the user's rights), as TRL runs it.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from app.errors import UserError


def is_file_target(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def import_target(target: str, what: str, entry: str):
    """The module ``target`` names (a .py path or a dotted module). ``what`` names the user's code in errors
    ("custom reward", "tool"), ``entry`` is what the user wrote."""
    if is_file_target(target):
        path = Path(target).expanduser()
        if not path.is_file():
            raise UserError(f"{what} file '{path}' not found; check the path in '{entry}'")
        mod_name = f"qlora_user_{what.replace(' ', '_')}_{abs(hash(str(path.resolve())))}"
        if mod_name in sys.modules:  # the same file again in this process: its functions are already known
            return sys.modules[mod_name]
        try:
            spec = importlib.util.spec_from_file_location(mod_name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[mod_name] = module  # so functions defined there pickle by reference
            spec.loader.exec_module(module)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the user's file (one that exits too): report it
            sys.modules.pop(mod_name, None)
            raise UserError(f"{what} file '{path}' failed to import ({type(e).__name__}: {e}); fix it") from None
        return module
    try:
        return importlib.import_module(target)
    except ImportError as e:
        raise UserError(f"{what} module '{target}' cannot be imported ({e}); check '{entry}' and "
                        "that the module is on PYTHONPATH") from None
    except (Exception, SystemExit) as e:  # noqa: BLE001
        raise UserError(f"{what} module '{target}' failed to import ({type(e).__name__}: {e})") from None
