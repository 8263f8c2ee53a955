"""Telling why a kind's files could not be written: a full file system is ``no_space``,
a folder that is read-only, gone or not ours to write is ``storage_unavailable``. Both
are refusals (the job fails at once, with a plain message its client sees): the same
write into the same place fails the same way however often it is retried, and a job
retried five times while it holds a full disk keeps it full. Anything else an
``OSError`` says stays an error of the attempt's (retried)."""

from __future__ import annotations

import errno

from activities.endings import Refused
from hubjobs.temporal.failures import NO_SPACE, STORAGE_UNAVAILABLE, message_for

NO_SPACE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT})
UNWRITABLE_ERRORS = frozenset(
    {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT, errno.ENOTDIR, errno.EISDIR}
)


def storage_refusal(err: OSError) -> Refused | None:
    """The refusal ``err`` stands for, if it is one."""
    if err.errno in NO_SPACE_ERRORS:
        return Refused(message_for(NO_SPACE), code=NO_SPACE)
    if err.errno in UNWRITABLE_ERRORS:
        return Refused(message_for(STORAGE_UNAVAILABLE), code=STORAGE_UNAVAILABLE)
    return None
