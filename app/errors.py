"""User-facing errors.

Anything the user can fix (bad flag, missing file, wrong value) is raised as ``UserError`` with a single line
that names the problem and the fix. The CLI prints it in red and exits with code 2 -- no traceback, because a
traceback tells a newcomer nothing they can act on.
"""


class UserError(Exception):
    """A problem in the user's input; the message is one line: what is wrong and what to change."""

    exit_code = 2


class RunFailed(UserError):
    """A run that stopped for a reason outside the input (full disk, NaN loss): the same one line, no traceback on
    the terminal (the full one is in train.log), but exit code 1, and status.json says failed."""

    exit_code = 1
