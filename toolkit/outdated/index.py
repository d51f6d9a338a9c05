"""A read-only client of a Python package index's simple API (PEP 503 HTML, PEP 691 JSON, PEP 658/714 core
metadata): the releases of one project, the files of each, and a file's core metadata.

Which index: `--index-url`, else pip's own setting (PIP_INDEX_URL, then `index-url` in pip's configuration
files), else pip's default index as pip itself names it. No URL is written here: the project follows pip.
"""

from __future__ import annotations

import configparser
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from email.parser import Parser
from functools import lru_cache
from html.parser import HTMLParser

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from toolkit.core.errors import PackageIndexError

ACCEPT = (
    "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
)
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


def pip_default_index() -> str:
    """The index pip uses when nothing is configured, as pip names it (never spelled out here)."""
    try:
        from pip._internal.models.index import PyPI  # pip's own constant: the one place the URL lives
    except ImportError as exc:  # pragma: no cover - pip is part of every venv this tool runs in
        raise PackageIndexError(
            "pip is not importable, so pip's default index is unknown", "pass --index-url URL or set PIP_INDEX_URL"
        ) from exc
    return str(PyPI.simple_url)


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


@lru_cache(maxsize=256)
def core_metadata(file_url: str, project: str) -> dict[str, list[str]]:
    """The core metadata of one file (PEP 658: the file's URL + ".metadata"), header -> values."""
    body, _, _ = _fetch(file_url.split("#")[0] + ".metadata", "*/*", f"the metadata of a {project} file")
    try:
        msg = Parser().parsestr(body.decode("utf-8"), headersonly=True)
    except (UnicodeDecodeError, ValueError) as exc:
        raise PackageIndexError(f"the core metadata of {file_url} cannot be read ({exc})", "check the index") from None
    if not msg.get("Name") or not msg.get("Version"):
        raise PackageIndexError(
            f"the core metadata of {file_url} has no Name/Version: not a METADATA file", "check the index"
        )
    out: dict[str, list[str]] = {}
    for key, value in msg.items():
        out.setdefault(key, []).append(str(value))
    return out


__all__ = ["IndexFile", "configured_index", "core_metadata", "pip_default_index", "project_files", "releases"]
