"""A file the command line writes (the HTML trace): never the store, owner-only, whole.

Such a file holds what the store holds (a trace carries a thread's whole state), so it is
made owner-only (0600), like the store's own files. It must never be one of the store's
files: writing a page over the database would destroy what the page shows. A path is the
store by its name, through a symbolic link, or as a hard link to the same file, so the
check asks the file system (`os.path.samefile`) about the database and its `-wal`, `-shm`
and `-journal` files, besides comparing resolved names (for a `-wal` not made yet).

The page is written to a new file in the output's folder, which then replaces the output
name in one rename (`os.replace`): whatever the name was (a hard link to the database, a
symbolic link swapped in after the check), the rename replaces the name and never writes
through it, and a reader of the output never sees half a page. The folder is held open
from the check to the rename, so a symbolic link swapped for one of the path's folders
meanwhile cannot redirect it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import attrs

__all__ = ["FILE_MODE", "Output"]

FILE_MODE = 0o600
"""The permissions of a file the command line writes: the owner's only."""

_STORE_FILES = ("", "-wal", "-shm", "-journal")


@attrs.frozen
class Output:
    """An output path named by `option` (`--html`), checked against the store at `db` (a
    SQLite file's path, or a DSN, which no path can be)."""

    option: str
    path: Path
    db: str

    def check(self) -> None:
        """Refuse, before any work, a path that cannot take the file or that is the store.
        Raises an `OSError` or `ValueError` naming the option and the path."""
        with self._folder() as folder:
            self._check_in(folder)

    def write(self, text: str) -> None:
        """Write `text` (UTF-8) as the whole file, owner-only; checked again first."""
        data = text.encode("utf-8")
        with self._folder() as folder:
            self._check_in(folder)
            name = self.path.name
            temporary = f".{name}.{secrets.token_hex(6)}.tmp"
            descriptor = os.open(
                temporary,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                FILE_MODE,
                dir_fd=folder,
            )
            try:
                with os.fdopen(descriptor, "wb") as file:
                    os.fchmod(file.fileno(), FILE_MODE)  # whatever the umask did
                    file.write(data)
                    file.flush()
                    os.fsync(file.fileno())
                os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=folder)
                raise

    @contextlib.contextmanager
    def _folder(self) -> Iterator[int]:
        """The output's folder, held open."""
        parent = self.path.parent
        if self.path.is_dir():
            raise IsADirectoryError(f"{self.option} {self.path}: it is a folder; give a file name")
        try:
            folder = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        except FileNotFoundError:
            raise FileNotFoundError(
                f"{self.option} {self.path}: the folder {parent} does not exist"
            ) from None
        except NotADirectoryError:
            raise NotADirectoryError(
                f"{self.option} {self.path}: {parent} is not a folder"
            ) from None
        try:
            yield folder
        finally:
            os.close(folder)

    def _check_in(self, folder: int) -> None:
        name = self.path.name
        if name in ("", ".", ".."):
            raise IsADirectoryError(f"{self.option} {self.path}: it is a folder; give a file name")
        try:
            found = os.stat(name, dir_fd=folder)
        except FileNotFoundError:
            found = None
        resolved = self.path.resolve()
        for store in [self.db + end for end in _STORE_FILES]:
            same = (
                found is not None
                and os.path.exists(store)
                and os.path.samestat(found, os.stat(store))
            )
            if same or resolved == Path(store).resolve():
                raise ValueError(
                    f"{self.option} {self.path} is the store itself (its file {store}, by "
                    f"name or by a link): nothing was written; give another file"
                )
