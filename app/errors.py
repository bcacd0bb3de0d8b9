"""User-facing errors, and what a failed write looks like whatever library raised it.

Anything the user can fix (bad flag, missing file, wrong value) is raised as ``UserError`` with a single line
that names the problem and the fix. The CLI prints it in red and exits with code 2 -- no traceback, because a
traceback tells a newcomer nothing they can act on.
"""

import errno


class UserError(Exception):
    """A problem in the user's input; the message is one line: what is wrong and what to change."""

    exit_code = 2


class DataError(UserError):
    """A dataset problem the user can fix; the message is one line: the problem and the fix."""


class RunFailed(UserError):
    """A run that stopped for a reason outside the input (full disk, NaN loss): the same one line, no traceback on
    the terminal (the full one is in train.log), but exit code 1, and status.json says failed."""

    exit_code = 1


# How a failed write reads when a library wraps the OSError in its own type: safetensors (SafetensorError "...I/O
# error: No space left on device (os error 28)") and torch.save (RuntimeError "... file write failed").
WRAPPED_WRITE_ERRORS = {"No space left on device": errno.ENOSPC, "os error 28": errno.ENOSPC,
                        "Disk quota exceeded": errno.EDQUOT, "os error 122": errno.EDQUOT,
                        "file write failed": errno.EIO}


def write_failure(e: BaseException) -> OSError | None:
    """The failed write behind ``e``, or None when ``e`` is not one."""
    if isinstance(e, OSError):
        return e
    if not isinstance(e, Exception) or isinstance(e, UserError):
        return None
    text = str(e).splitlines()[0] if str(e) else ""
    code = next((c for needle, c in WRAPPED_WRITE_ERRORS.items() if needle in text), None)
    return None if code is None else OSError(code, text)


