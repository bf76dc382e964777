"""This user's own folder under /tmp, for what must sit at a short path: Ray's temp dir and the front's admin socket.

Why: both were at predictable ``/tmp`` paths (``/tmp/raylift-ray-<key>``, ``/tmp/raylift-front-<key>.sock``) that
another local user could create first, or enter (Ray makes its temp dir 0777 without the sticky bit). Unix socket
paths must fit in 107 bytes, so a folder under ``RAYLIFT_HOME`` (often deep) will not do; a fresh
``tempfile.mkdtemp`` would, but a later task must find the same cluster's folder again. So: one folder per uid,
``/tmp/raylift-<uid>``, made 0700 by this uid, and refused (never used, never chmod'ed) when it is anything else: a
link, another owner's, or open to group or others; everything under it is out of other users' reach whatever mode
Ray gives its own folders.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from raylift.errors import ClusterError

ROOT = Path("/tmp")


def private_tmp(root: Path = ROOT) -> Path:
    """``<root>/raylift-<uid>``, created 0700 if missing, checked if present.

    :raises ClusterError: it exists and is not a folder of this uid's with mode 0700 (naming what is wrong)."""
    uid = os.getuid()
    folder = root / f"raylift-{uid}"
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(folder)
    wrong = ("a link or not a folder" if not stat.S_ISDIR(info.st_mode) else
             f"owned by uid {info.st_uid}, not {uid}" if info.st_uid != uid else
             f"mode {stat.S_IMODE(info.st_mode):o}, open to other users" if info.st_mode & 0o077 else None)
    if wrong:
        raise ClusterError(
            f"{folder} holds raylift's Ray temp dirs and front sockets and must be this user's own folder (mode 700), "
            f"but it is {wrong}. Another user may have made it: remove it (or, if it is yours, chmod 700 it) and "
            "run again. Nothing was started.")
    return folder
