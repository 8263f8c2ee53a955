"""Why a kind's files could not be written: ``no_space`` or ``storage_unavailable``,
both refusals (a retry would fail the same, and keep a full disk full); any other
``OSError`` stays the attempt's error, retried."""

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
