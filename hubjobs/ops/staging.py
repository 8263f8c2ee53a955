"""Attachment files into the restore's folder (DIR), all or nothing, never outside it.

DIR is taken as given (a link there is followed once); below it every step works from
an open folder descriptor, one component at a time, with O_NOFOLLOW. Files are staged
in a private folder of DIR and linked into place only after the database commits; only
a writer racing the restore in DIR can then fail it (``attachments_incomplete``).
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import secrets
import stat
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from hubjobs.archive.format import RESERVED_PREFIX, storage_path_parts
from hubjobs.archive.reader import Archive, Attachment
from hubjobs.errors import HubJobsError

log = logging.getLogger(__name__)

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_ROOT_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
# Room kept free beyond the attachments' bytes (folders, file system overhead).
SPACE_MARGIN = 64 << 20


class AttachmentsRefused(HubJobsError):
    """DIR cannot take the archive's attachments; ``code`` says why."""

    code = "attachments_unwritable"


class Stopped(Exception):
    """Staging was told to stop (the database load failed)."""


def _not_empty(what: str) -> AttachmentsRefused:
    return AttachmentsRefused(
        f"the attachments folder already holds {what}", code="attachments_not_empty"
    )


def _os_error(err: OSError, doing: str) -> AttachmentsRefused:
    log.info("attachments folder: %s: %s", doing, err)
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        return AttachmentsRefused(
            f"the attachments folder ran out of room while {doing}", code="attachments_no_space"
        )
    return AttachmentsRefused(
        f"the attachments folder cannot be written ({doing}: {os.strerror(err.errno or 0)})",
        code="attachments_unwritable",
    )


class AttachmentStore:
    def __init__(self, root: Path, attachments: Sequence[Attachment]) -> None:
        self.root = Path(os.path.abspath(root))
        self.attachments = attachments
        # Targets that may exist and are renamed over: the replaced workspace's files,
        # and with ``adopt_identical`` a file holding the attachment's very bytes.
        self.replaceable: frozenset[str] = frozenset()
        self.adopt_identical = False
        self._identical: set[str] = set()
        self.staging_name: str | None = None
        self._root_fd: int | None = None
        self._staging_fd: int | None = None
        self._staged: list[str] = []
        # Folders this restore created, in order: DIR and its missing ancestors, and
        # the targets' folders below DIR (as path parts).
        self._created_root: list[Path] = []
        self._created: list[tuple[str, ...]] = []

    @property
    def staging_path(self) -> Path | None:
        return self.root / self.staging_name if self.staging_name else None

    # --- before anything is written --------------------------------------------------

    def check(self) -> None:
        """Raises AttachmentsRefused unless every target can be created as planned."""
        existing = self.root
        while not os.path.lexists(existing):
            existing = existing.parent
        try:
            info = os.stat(existing)
        except OSError as err:
            raise _os_error(err, "looking at it") from None
        if not stat.S_ISDIR(info.st_mode):
            raise AttachmentsRefused(f"{existing} is not a folder", code="attachments_unwritable")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise AttachmentsRefused(f"{existing} cannot be written", code="attachments_unwritable")
        needed = sum(a.size for a in self.attachments)
        try:
            fs = os.statvfs(existing)
        except OSError as err:
            raise _os_error(err, "looking at it") from None
        if self.attachments and fs.f_bavail * fs.f_frsize < needed + SPACE_MARGIN:
            raise AttachmentsRefused(
                f"the attachments folder's file system has {fs.f_bavail * fs.f_frsize} "
                f"bytes free; the archive's attachments need {needed}",
                code="attachments_no_space",
            )
        if existing != self.root:
            return  # DIR does not exist yet: nothing in it can be in the way
        try:
            root_fd = os.open(self.root, _ROOT_FLAGS)
        except OSError as err:
            raise _os_error(err, "opening it") from None
        try:
            self._check_targets(root_fd, info.st_dev)
        except OSError as err:
            raise _os_error(err, "looking into it") from None
        finally:
            os.close(root_fd)

    def _check_targets(self, root_fd: int, device: int) -> None:
        known: dict[tuple[str, ...], bool] = {(): True}  # folder -> exists (as a folder)
        for attachment in self.attachments:
            parts = attachment.parts
            for depth in range(1, len(parts)):
                folder = parts[:depth]
                if folder in known:
                    if not known[folder]:
                        break
                    continue
                kind = _lstat(root_fd, "/".join(folder))
                if kind is None:
                    known[folder] = False
                    break
                if not stat.S_ISDIR(kind.st_mode):
                    raise _not_empty(f"{'/'.join(folder)}, which is not a plain folder")
                if kind.st_dev != device:
                    raise AttachmentsRefused(
                        f"{'/'.join(folder)} is on another file system than the folder",
                        code="attachments_unwritable",
                    )
                known[folder] = True
            else:
                if _lstat(root_fd, attachment.storage_path) is not None:
                    self._require_replaceable(root_fd, attachment.storage_path, attachment)

    def _require_replaceable(self, dir_fd: int, name: str, attachment: Attachment) -> None:
        """A target that exists may be replaced, or the restore is refused."""
        path = attachment.storage_path
        if path in self.replaceable or path in self._identical:
            return
        if self.adopt_identical and _holds(dir_fd, name, attachment):
            self._identical.add(path)
            return
        raise _not_empty(path)

    # --- staging ------------------------------------------------------------------------

    def open(self, names: Iterator[str] | None = None) -> None:
        """Creates DIR if need be and the staging folder in it (``names`` are the
        staging names to try, for tests; random ones otherwise)."""
        try:
            missing: list[Path] = []
            folder = self.root
            while not os.path.lexists(folder):
                missing.append(folder)
                folder = folder.parent
            for path in reversed(missing):
                os.mkdir(path, 0o700)
                self._created_root.append(path)
            self._root_fd = os.open(self.root, _ROOT_FLAGS)
            for name in names or (RESERVED_PREFIX + secrets.token_hex(8) for _ in range(100)):
                try:
                    os.mkdir(name, 0o700, dir_fd=self._root_fd)
                except FileExistsError:
                    continue
                self.staging_name = name
                break
            else:
                raise AttachmentsRefused(
                    "no staging folder could be created", code="attachments_unwritable"
                )
            self._staging_fd = os.open(name, _DIR_FLAGS, dir_fd=self._root_fd)
        except OSError as err:
            raise _os_error(err, "creating the staging folder") from None

    def stage(self, archive: Archive, stop: threading.Event) -> None:
        """Writes and fsyncs every attachment into the staging folder (on a thread of its
        own); raises ArchiveError for a damaged one, Stopped when told to stop."""
        assert self._staging_fd is not None
        try:
            for attachment in self.attachments:
                fd = os.open(attachment.id, _NEW_FILE, 0o600, dir_fd=self._staging_fd)
                self._staged.append(attachment.id)
                with open(fd, "wb", buffering=0) as out:
                    for block in archive.attachment_blocks(attachment):
                        if stop.is_set():
                            raise Stopped()
                        view = memoryview(block)
                        while view:
                            view = view[out.write(view) or 0 :]
                    os.fsync(fd)
            os.fsync(self._staging_fd)
        except OSError as err:
            raise _os_error(err, "staging the attachments") from None

    def prepare(self) -> None:
        """Just before the commit: every target's folders exist (created no-follow), no
        target exists, and what was created is on disk."""
        assert self._root_fd is not None
        try:
            for attachment in self.attachments:
                folder = attachment.parts[:-1]
                parent = self._walk(folder, create=True)
                try:
                    if _lstat(parent, attachment.parts[-1]) is not None:
                        self._require_replaceable(parent, attachment.parts[-1], attachment)
                finally:
                    os.close(parent)
            for folder in {c[:-1] for c in self._created} | {c for c in self._created}:
                self._fsync(folder)
        except OSError as err:
            raise _os_error(err, "creating the attachments' folders") from None

    def _walk(self, folder: tuple[str, ...], *, create: bool) -> int:
        """An open descriptor of ``folder`` below the root, reached without following
        a link; missing folders are created (and recorded) when ``create``."""
        assert self._root_fd is not None
        fd = os.dup(self._root_fd)
        try:
            for depth, part in enumerate(folder, start=1):
                try:
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise
                    os.mkdir(part, 0o700, dir_fd=fd)
                    self._created.append(folder[:depth])
                    child = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except OSError as err:
                    if err.errno in (errno.ELOOP, errno.ENOTDIR):
                        where = "/".join(folder[:depth])
                        raise _not_empty(f"{where}, which is not a plain folder") from None
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _fsync(self, folder: tuple[str, ...]) -> None:
        fd = self._walk(folder, create=False)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # --- after the commit -----------------------------------------------------------------

    def install(self) -> None:
        """Moves every staged file to its target; a failure (only a concurrent writer in
        DIR causes one) keeps the staging folder and names it (attachments_incomplete)."""
        assert self._root_fd is not None and self._staging_fd is not None
        failed: list[str] = []
        folders: set[tuple[str, ...]] = set()
        for attachment in self.attachments:
            try:
                parent = self._walk(attachment.parts[:-1], create=True)
                try:
                    path = attachment.storage_path
                    if path in self.replaceable or path in self._identical:
                        os.rename(
                            attachment.id,
                            attachment.parts[-1],
                            src_dir_fd=self._staging_fd,
                            dst_dir_fd=parent,
                        )
                    else:
                        os.link(
                            attachment.id,
                            attachment.parts[-1],
                            src_dir_fd=self._staging_fd,
                            dst_dir_fd=parent,
                            follow_symlinks=False,
                        )
                        os.unlink(attachment.id, dir_fd=self._staging_fd)
                finally:
                    os.close(parent)
                folders.add(attachment.parts[:-1])
            except (OSError, AttachmentsRefused) as err:
                log.error("attachment %s not moved into place: %s", attachment.storage_path, err)
                failed.append(attachment.storage_path)
        for folder in folders:
            try:
                self._fsync(folder)
            except (OSError, AttachmentsRefused) as err:
                log.error("folder %s not synced: %s", "/".join(folder), err)
        if failed:
            self._close()
            raise AttachmentsRefused(
                f"the database is restored, but {len(failed)} attachment files could not be "
                f"moved into place (something else wrote to the folder); they are in "
                f"{self.staging_path}, named by attachment id",
                code="attachments_incomplete",
            )
        assert self.staging_name is not None
        os.close(self._staging_fd)
        self._staging_fd = None
        # Everything is in place: what remains is tidying, and it may not fail the restore.
        _quietly(os.rmdir, self.staging_name, dir_fd=self._root_fd)
        _quietly(os.fsync, self._root_fd)
        self._close()

    def remove(self, paths: Sequence[str]) -> int:
        """Unlinks the files of a replaced workspace's removed attachments, skipping a bad
        path or a file that is gone; never raises, returns how many went."""
        removed = 0
        try:
            root_fd = os.open(self.root, _ROOT_FLAGS)
        except OSError as err:
            log.warning("attachments folder: the old files stay (%s)", err)
            return 0
        self._root_fd = root_fd
        try:
            for path in paths:
                try:
                    parts = storage_path_parts(path)
                    parent = self._walk(parts[:-1], create=False)
                except (ValueError, OSError, AttachmentsRefused):
                    continue
                try:
                    os.unlink(parts[-1], dir_fd=parent)
                    os.fsync(parent)
                    removed += 1
                except OSError as err:
                    log.info("attachment file %s not removed: %s", path, err)
                finally:
                    os.close(parent)
        finally:
            self._close()
        return removed

    def abandon(self) -> None:
        """Leaves everything staged where it is (the caller says where), closing up."""
        self._close()

    def discard(self) -> None:
        """Undoes ``open``, ``stage`` and ``prepare``: DIR is as it was. Never raises."""
        try:
            if self._staging_fd is not None:
                for name in self._staged:
                    _quietly(os.unlink, name, dir_fd=self._staging_fd)
            if self._root_fd is not None:
                for folder in reversed(self._created):
                    try:
                        parent = self._walk(folder[:-1], create=False)
                    except (OSError, AttachmentsRefused):
                        continue
                    _quietly(os.rmdir, folder[-1], dir_fd=parent)
                    os.close(parent)
                if self.staging_name is not None:
                    _quietly(os.rmdir, self.staging_name, dir_fd=self._root_fd)
            self._close()
            for path in reversed(self._created_root):
                _quietly(os.rmdir, path)
        except Exception:  # discard is the last resort; log and leave the rest
            log.exception("could not undo everything in the attachments folder")
        finally:
            self._close()

    def _close(self) -> None:
        for fd in (self._staging_fd, self._root_fd):
            if fd is not None:
                _quietly(os.close, fd)
        self._staging_fd = self._root_fd = None


def _holds(dir_fd: int, name: str, attachment: Attachment) -> bool:
    """Whether ``name`` (below ``dir_fd``, not followed if a link) is a plain file of
    the attachment's size and sha256."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return False
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != attachment.size:
            return False
        digest = hashlib.sha256()
        while block := os.read(fd, 1 << 20):
            digest.update(block)
        return digest.hexdigest() == attachment.sha256
    finally:
        os.close(fd)


def _lstat(dir_fd: int, path: str) -> os.stat_result | None:
    try:
        return os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _quietly(fn: Callable[..., object], *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except OSError as err:
        log.warning("attachments folder clean-up: %s", err)
