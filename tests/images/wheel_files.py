"""A released wheel's own file list (and a few of its files), read from PyPI without downloading the wheel.

vLLM wheels are 130-400 MB. A zip keeps its table of contents (the central directory) at its end, so
the list of a wheel's files costs a few HTTP range requests against the file host, not the wheel.
``RangeFile`` is a read-only, seekable file over HTTP ``Range`` requests; the standard library's
``zipfile`` does all the zip parsing (zip64 included) on top of it, and can also inflate one member
(one more range request). This is what the ``remotezip`` package does; the standard library keeps the
control environment's lock unchanged for a test helper of ~100 lines.

The wheel's URL comes from PyPI's JSON API. Results are cached under ``.cache/wheel-files/`` keyed by
the wheel's sha256 (a file on PyPI never changes), with the release's wheel URL itself, so only a clean
clone's first run reaches PyPI.
"""

from __future__ import annotations

import dataclasses
import functools
import io
import json
import os
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PYPI = "https://pypi.org/pypi"
TIMEOUT_S = 60
_BLOCK = 256 * 1024  # one range request reads at least this much (the central directory is ~1-3 MB)


@dataclass(frozen=True)
class WheelRef:
    """One wheel file of a release on PyPI."""

    project: str
    version: str
    filename: str
    url: str
    sha256: str
    size: int
    requires_python: str | None


class RangeFile(io.RawIOBase):
    """A remote file read by HTTP ``Range`` requests: enough of a file for ``zipfile.ZipFile``."""

    def __init__(self, url: str, size: int) -> None:
        super().__init__()
        self.url, self.size, self._pos = url, size, 0
        self.requests = 0
        self._cache: dict[int, bytes] = {}  # block start -> bytes

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        want = min(len(view), self.size - self._pos)
        if want <= 0:
            return 0
        data = self._read_range(self._pos, self._pos + want)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)

    def _read_range(self, start: int, end: int) -> bytes:
        first, last = start - start % _BLOCK, end - 1 - (end - 1) % _BLOCK
        missing = [b for b in range(first, last + 1, _BLOCK) if b not in self._cache]
        if missing:  # one request for the whole missing span
            lo, hi = missing[0], min(missing[-1] + _BLOCK, self.size)
            data = self._get(lo, hi)
            for b in range(lo, hi, _BLOCK):
                self._cache[b] = data[b - lo : b - lo + _BLOCK]
        blob = b"".join(self._cache[b] for b in range(first, last + 1, _BLOCK))
        return blob[start - first : end - first]

    def _get(self, start: int, end: int) -> bytes:
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={start}-{end - 1}"})
        self.requests += 1
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            if response.status != 206:
                raise OSError(f"{self.url} ignored the Range request (HTTP {response.status}): refusing to download it")
            data: bytes = response.read()
        if len(data) != end - start:
            raise OSError(f"{self.url}: asked bytes {start}-{end - 1}, got {len(data)} bytes")
        return data


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=TIMEOUT_S) as response:
        return json.load(response)


def find_wheel(project: str, version: str, platform: str = "x86_64") -> WheelRef:
    """``_find_wheel``, cached: a release's files on PyPI do not change once uploaded."""
    path = cache_dir() / "refs" / f"{project}-{version}-{platform}.json"
    if path.is_file():
        return WheelRef(**json.loads(path.read_text()))
    ref = _find_wheel(project, version, platform)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(dataclasses.asdict(ref)))
    return ref


def _find_wheel(project: str, version: str, platform: str) -> WheelRef:
    """The release's wheel for ``platform`` (a pure-Python wheel if that is all there is).

    PyPI's per-release JSON (``/pypi/<project>/<version>/json``) is asked first; a mirror that serves
    only the project JSON is answered from its ``releases`` table. File URLs may be relative to the page.
    """
    page = f"{PYPI}/{project}/{version}/json"
    try:
        files = _get_json(page)["urls"]
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise
        page = f"{PYPI}/{project}/json"
        releases = _get_json(page)["releases"]
        if version not in releases:
            raise LookupError(f"PyPI has no {project}=={version}") from None
        files = releases[version]
    wheels = [f for f in files if f["filename"].endswith(".whl") and not f.get("yanked")]
    ranked = [f for f in wheels if platform in f["filename"]] or [f for f in wheels if "-none-any" in f["filename"]]
    if not ranked:
        raise LookupError(f"PyPI has no {platform} wheel of {project}=={version}: {[f['filename'] for f in files]}")
    f = ranked[0]
    return WheelRef(
        project, version, f["filename"], urllib.parse.urljoin(page, f["url"]), f["digests"]["sha256"],
        int(f["size"]), f.get("requires_python"),
    )


@functools.cache
def _remote_zip(ref: WheelRef) -> zipfile.ZipFile:
    """The wheel as a zip over range requests; one per wheel and process, so its directory is read once."""
    return zipfile.ZipFile(io.BufferedReader(RangeFile(ref.url, ref.size), buffer_size=_BLOCK))


def cache_dir() -> Path:
    from raylift.config import repo_root

    return Path(os.environ.get("RAYLIFT_CACHE") or repo_root() / ".cache") / "wheel-files"


def wheel_listing(project: str, version: str) -> dict[str, Any]:
    """``{"wheel": filename, "requires_python": ..., "files": [every path in the wheel]}``, cached."""
    ref = find_wheel(project, version)
    path = cache_dir() / f"{ref.filename}.{ref.sha256[:16]}.json"
    if path.is_file():
        cached: dict[str, Any] = json.loads(path.read_text())
        return cached
    names = sorted(_remote_zip(ref).namelist())
    listing = {"wheel": ref.filename, "sha256": ref.sha256, "requires_python": ref.requires_python, "files": names}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(listing))
    tmp.replace(path)
    return listing


def wheel_member(project: str, version: str, member: str) -> str:
    """One text file of the wheel (e.g. a module's source), cached beside the listing."""
    ref = find_wheel(project, version)
    path = cache_dir() / f"{ref.filename}.{ref.sha256[:16]}" / member
    if path.is_file():
        return path.read_text()
    text = _remote_zip(ref).read(member).decode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return text
