"""A read-only client of a Python package index's simple API (PEP 503 HTML, PEP 691 JSON, PEP 658/714 core
metadata): the releases of one project, the files of each, and a file's core metadata.

Which index: `--index-url`, else pip's own setting (PIP_INDEX_URL, then `index-url` in pip's configuration
files), else pip's default index as pip itself names it. No URL is written here: the project follows pip.
"""

from __future__ import annotations

import configparser
import io
import json
import os
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from functools import lru_cache
from html.parser import HTMLParser
from typing import Any

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from toolkit.core.errors import PackageIndexError

ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
TIMEOUT_S = 30.0
PIP_DEFAULT = "pip's default index"


def _pip_config_index() -> str | None:
    """`index-url` from pip's configuration files (the same files, in the same order, provisioning reads)."""
    from toolkit.build.provision import _pip_config_files

    found = None
    for path in _pip_config_files():
        cp = configparser.ConfigParser()
        try:
            cp.read(path)
        except (OSError, configparser.Error):
            continue
        for section in ("global", "install"):
            if cp.has_option(section, "index-url"):
                found = cp.get(section, "index-url").split()[0]
    return found


@lru_cache(maxsize=1)
def pip_default_index() -> str:
    """The index pip uses when nothing is configured, as pip itself names it (never spelled out here). Asked of
    pip in a child process: importing pip into this one would switch setuptools' distutils shim off for the rest
    of the process."""
    code = "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=60)
    url = proc.stdout.strip()
    if proc.returncode != 0 or not url.startswith(("http://", "https://")):
        raise PackageIndexError(
            "pip is not available to this Python, so pip's default index is unknown",
            "pass --index-url URL or set PIP_INDEX_URL",
        )
    return url


def configured_index(explicit: str | None = None) -> tuple[str, str]:
    """(the index URL to read, how it was chosen): the option, PIP_INDEX_URL, pip's config, pip's default."""
    if explicit:
        return explicit.rstrip("/") + "/", "--index-url"
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"].split()[0].rstrip("/") + "/", "PIP_INDEX_URL"
    from_config = _pip_config_index()
    if from_config:
        return from_config.rstrip("/") + "/", "pip's configuration"
    return pip_default_index().rstrip("/") + "/", PIP_DEFAULT


@dataclass(frozen=True)
class IndexFile:
    """One distribution file of a release as the index lists it."""

    filename: str
    url: str
    version: Version
    tags: tuple[str, ...]  # wheel platform tags ("manylinux_2_28_x86_64", ...); () for an sdist
    metadata: bool  # the index serves its core metadata (PEP 658/714)
    yanked: bool = False

    @property
    def local(self) -> str:
        """The local version label (`cu132` of 2.15.0+cu132), "" when none."""
        return self.version.local or ""


def _version_of(filename: str) -> tuple[Version, tuple[str, ...]] | None:
    try:
        if filename.endswith(".whl"):
            _, version, _, tags = parse_wheel_filename(filename)
            return version, tuple(sorted({t.platform for t in tags}))
        if filename.endswith((".tar.gz", ".zip")):
            return parse_sdist_filename(filename)[1], ()
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return None


class _Anchors(HTMLParser):
    """The <a> elements of a PEP 503 page: (href, text, attributes)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, dict[str, str | None]]] = []
        self._current: dict[str, str | None] | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._current, self._text = dict(attrs), []

    def handle_data(self, data: str) -> None:
        if self._current is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._current is not None:
            self._current["#text"] = "".join(self._text).strip()
            self.links.append((str(self._current.get("href") or ""), self._current))
            self._current = None


def _fetch(url: str, accept: str, what: str) -> tuple[bytes, str, str]:
    """(body, content type, final URL) of a GET; PackageIndexError (one line) when it fails."""
    req = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "ggml-vendor"})
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310 - an index URL the user set
            ctype = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
            return resp.read(), ctype, resp.geturl()
    except urllib.error.HTTPError as exc:
        hint = "check the project name and the index URL" if exc.code == 404 else "try again later"
        raise PackageIndexError(f"the index answered HTTP {exc.code} for {what} ({url})", hint) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise PackageIndexError(
            f"cannot reach the package index for {what} ({url}): {reason}",
            "check the network, or point --index-url / PIP_INDEX_URL at a reachable index",
        ) from None


def _malformed(project: str, url: str, why: str) -> PackageIndexError:
    return PackageIndexError(
        f"the index page of {project} ({url}) is malformed: {why}",
        "check that --index-url / PIP_INDEX_URL names a PEP 503/691 simple index",
    )


def _from_json(project: str, url: str, body: bytes) -> list[tuple[str, str, bool, bool]]:
    try:
        doc = json.loads(body)
        files = doc["files"]
        out = []
        for f in files:
            meta = f.get("core-metadata", f.get("dist-info-metadata", False))
            out.append((str(f["filename"]), str(f["url"]), bool(meta), bool(f.get("yanked", False))))
        return out
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _malformed(project, url, f"not the JSON of PEP 691 ({type(exc).__name__}: {exc})") from None


def _from_html(project: str, url: str, body: bytes) -> list[tuple[str, str, bool, bool]]:
    parser = _Anchors()
    try:
        parser.feed(body.decode("utf-8"))
        parser.close()
    except (UnicodeDecodeError, ValueError) as exc:
        raise _malformed(project, url, f"not an HTML page ({exc})") from None
    if b"<" not in body:
        raise _malformed(project, url, "not an HTML page (no markup at all)")
    out = []
    for href, attrs in parser.links:
        name = str(attrs.get("#text") or urllib.parse.unquote(href.split("#")[0].rsplit("/", 1)[-1]))
        meta = attrs.get("data-core-metadata", attrs.get("data-dist-info-metadata"))
        out.append((name, href, meta is not None and meta != "false", "data-yanked" in attrs))
    return out


@lru_cache(maxsize=64)
def project_files(index: str, project: str) -> tuple[IndexFile, ...]:
    """Every release file of `project` on `index` (cached per process: several packages ask the same)."""
    url = urllib.parse.urljoin(index, f"{project}/")
    body, ctype, final = _fetch(url, ACCEPT, f"{project}")
    rows = _from_json(project, final, body) if ctype == JSON_TYPE else _from_html(project, final, body)
    files = []
    for filename, href, meta, yanked in rows:
        parsed = _version_of(filename)
        if parsed is None:
            continue  # eggs, .exe installers and the like: nothing a release list needs
        files.append(IndexFile(filename, urllib.parse.urljoin(final, href), parsed[0], parsed[1], meta, yanked))
    if rows and not files:
        raise _malformed(project, final, "none of its links is a wheel or sdist file name")
    return tuple(files)


def releases(index: str, project: str) -> dict[Version, tuple[IndexFile, ...]]:
    """Final (not pre-, dev- or yanked) releases of `project`, newest first, each with its files. Local versions
    (2.15.0+cu132 on a wheel index) count as their public release."""
    out: dict[Version, list[IndexFile]] = {}
    for f in project_files(index, project):
        public = Version(f.version.public)
        if f.yanked or public.is_prerelease or public.is_devrelease:
            continue
        out.setdefault(public, []).append(f)
    return {v: tuple(out[v]) for v in sorted(out, reverse=True)}


class _RangeReader(io.RawIOBase):
    """A remote file read by HTTP Range requests, in blocks: zipfile reads a wheel's central directory and one
    member (METADATA) through it, a few hundred KiB of a wheel of hundreds of MB."""

    BLOCK = 256 * 1024

    def __init__(self, url: str, what: str) -> None:
        super().__init__()
        self.url, self.what, self.pos = url, what, 0
        self.blocks: dict[int, bytes] = {}
        self.size = self._size()

    def _get(self, start: int, end: int) -> tuple[bytes, str]:
        req = urllib.request.Request(self.url, headers={"Range": f"bytes={start}-{end}", "User-Agent": "ggml-vendor"})
        try:
            with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:  # noqa: S310 - a file the index listed
                if resp.status != 206:
                    raise PackageIndexError(
                        f"the file server of {self.what} does not serve byte ranges, and the index offers no core "
                        "metadata for it (PEP 658)",
                        "use an index that serves core metadata",
                    )
                return resp.read(), resp.headers.get("Content-Range", "")
        except urllib.error.URLError as exc:
            raise PackageIndexError(
                f"cannot read {self.what} ({self.url}): {exc.reason}", "check the network"
            ) from None

    def _size(self) -> int:
        _, crange = self._get(0, 0)
        try:
            return int(crange.rsplit("/", 1)[1])
        except (IndexError, ValueError):
            raise PackageIndexError(f"{self.url} answered a byte range without its size", "check the index") from None

    def _block(self, n: int) -> bytes:
        if n not in self.blocks:
            start = n * self.BLOCK
            self.blocks[n] = self._get(start, min(start + self.BLOCK, self.size) - 1)[0]
        return self.blocks[n]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def tell(self) -> int:
        return self.pos

    def readinto(self, buf: Any) -> int:  # a writable buffer (bytearray, memoryview)
        want = min(len(buf), max(0, self.size - self.pos))
        out = bytearray()
        while len(out) < want:
            n, off = divmod(self.pos + len(out), self.BLOCK)
            out += self._block(n)[off : off + want - len(out)]
        buf[: len(out)] = out
        self.pos += len(out)
        return len(out)


def _metadata_from_wheel(file: IndexFile, project: str) -> bytes:
    """The METADATA member of a wheel, read with byte ranges (the index advertises no PEP 658 file)."""
    what = f"the {project} wheel {file.filename}"
    try:
        with zipfile.ZipFile(io.BufferedReader(_RangeReader(file.url.split("#")[0], what), 1 << 16)) as zf:
            name = next((n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1), None)
            if name is None:
                raise PackageIndexError(f"{what} has no .dist-info/METADATA", "check the index")
            return zf.read(name)
    except zipfile.BadZipFile as exc:
        raise PackageIndexError(f"{what} is not a readable wheel ({exc})", "check the index") from None


@lru_cache(maxsize=256)
def core_metadata(file: IndexFile, project: str) -> dict[str, list[str]]:
    """The core metadata of one wheel, header -> values: the index's PEP 658 file (the file's URL +
    ".metadata") when it advertises one, else the wheel's own METADATA read by byte ranges."""
    if file.metadata:
        body, _, _ = _fetch(file.url.split("#")[0] + ".metadata", "*/*", f"the metadata of {file.filename}")
    else:
        body = _metadata_from_wheel(file, project)
    try:
        msg = Parser().parsestr(body.decode("utf-8"), headersonly=True)
    except (UnicodeDecodeError, ValueError) as exc:
        raise PackageIndexError(
            f"the core metadata of {file.filename} cannot be read ({exc})", "check the index"
        ) from None
    if not msg.get("Name") or not msg.get("Version"):
        raise PackageIndexError(
            f"the core metadata of {file.filename} has no Name/Version: not a METADATA file", "check the index"
        )
    out: dict[str, list[str]] = {}
    for key, value in msg.items():
        out.setdefault(key, []).append(str(value))
    return out


__all__ = ["IndexFile", "configured_index", "core_metadata", "pip_default_index", "project_files", "releases"]
