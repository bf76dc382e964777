"""Ray's temp dir and the front's admin socket sit in this user's own 0700 folder under /tmp, never at a path another
local user could create first or enter (raylift.local.private_tmp); a folder at that path that is not this user's
own, or is open to others, is refused by name and left as it is."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from raylift.config import LocalSettings
from raylift.errors import ClusterError
from raylift.local.cluster import LocalRayCluster
from raylift.local.front import LocalFront
from raylift.local.private_tmp import private_tmp


def _private(folder: Path) -> bool:
    info = os.lstat(folder)
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700


def test_ray_temp_dirs_and_the_front_socket_are_in_this_users_0700_folder(tmp_path: Path) -> None:
    settings = LocalSettings(home=tmp_path / "home", front_port=31990)
    cluster = LocalRayCluster(settings)
    front = LocalFront(settings, {"blue": 8000, "green": 8030}, Path("/bin/true"))
    for path in (cluster.temp_dir, cluster.worker_temp_dir(3), cluster.haproxy_dir, front.socket_path):
        parents = [p for p in path.parents if p != Path("/") and p.is_dir()]
        assert any(_private(p) for p in parents), f"{path}: no parent is this user's own 0700 folder"
        assert len(str(path)) < 60  # room for Ray's session/sockets names in a unix socket path's 107 bytes


def test_a_folder_at_the_path_that_is_not_this_users_own_is_refused_and_left_alone(tmp_path: Path) -> None:
    made = private_tmp(tmp_path)
    assert made == tmp_path / f"raylift-{os.getuid()}" and _private(made)
    assert private_tmp(tmp_path) == made  # found again
    made.chmod(0o777)
    with pytest.raises(ClusterError, match=r"mode 777, open to other users.*chmod 700"):
        private_tmp(tmp_path)
    assert stat.S_IMODE(made.stat().st_mode) == 0o777  # refused, not repaired behind the user's back
    made.rmdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    made.symlink_to(elsewhere)
    with pytest.raises(ClusterError, match="a link or not a folder"):
        private_tmp(tmp_path)
    made.unlink()
    if os.getuid() == 0:  # another owner can be made only as root
        made.mkdir(mode=0o700)
        os.chown(made, 4242, 4242)
        with pytest.raises(ClusterError, match="owned by uid 4242"):
            private_tmp(tmp_path)
