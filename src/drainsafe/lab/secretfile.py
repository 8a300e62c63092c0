"""Writing the lab's secrets: the kubeconfig (its bearer token runs any command as the lab's
user, since pods are local processes) and the API server's TLS key.

Decision: a secret is never written into an existing file, nor through a symbolic link.
It is written to a new file created beside the target with O_CREAT|O_EXCL|O_NOFOLLOW and
mode 0600 (so no other user can open it in between), then renamed over the target. An
existing file or symbolic link at the target is replaced, atomically: the link itself, not
what it points to (rename(2) does not follow a link in its destination). The directories
holding secrets are made 0700 when drainsafe creates them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from pathlib import Path

SECRET_MODE = 0o600
PRIVATE_DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    """DIR (and its parents) created if missing, and DIR itself made 0700 when it is this
    user's own directory (a lab from an older drainsafe left it 0755)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileExistsError):  # there already, or made in between
        path.mkdir(mode=PRIVATE_DIR_MODE)
    info = os.lstat(path)
    if stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() \
            and stat.S_IMODE(info.st_mode) != PRIVATE_DIR_MODE:
        os.chmod(path, PRIVATE_DIR_MODE)  # also: mkdir's mode is masked by the umask
    return path


def write_secret(path: Path, data: bytes) -> None:
    """Replace PATH with a new 0600 file holding DATA (see the module docstring)."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise IsADirectoryError(f"{path}: is a directory; cannot write a secret there")
    temp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(temp, flags, SECRET_MODE)
    try:
        os.fchmod(fd, SECRET_MODE)  # the umask may have taken bits off; never adds any
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
