"""How a web connector crawls: its mode, and for a `site` crawl, what bounds the discovery.

`list` (the default) crawls the connector's (or pipeline's) URL list. `site` starts from start
URLs, discovers pages from sitemaps and same-site links, and is bounded by scope (the start URLs'
hosts, or their registrable domains with `subdomains`), depth, max pages and include/exclude
path patterns. Stored in the connector's config under CRAWL_MODE_KEY and SITE_KEY; validated here,
so a bad value is refused at creation with the field named and nothing is written.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pipelines_dagster.core.crawl.urls import normalize_url
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.validation import validate_choice, validate_urls

CRAWL_MODE_KEY = "CRAWL_MODE"
SITE_KEY = "SITE_CRAWL"

DEFAULT_MAX_DEPTH = 3
MAX_DEPTH = 20
DEFAULT_MAX_PAGES = 1_000
# The deployment's ceiling on max_pages (PIPELINES_SITE_MAX_PAGES_CAP) defaults to this.
DEFAULT_MAX_PAGES_CAP = 10_000
MAX_PATTERNS = 50
MAX_PATTERN_LENGTH = 500
ALL_QUERY_PARAMS = "all"
_QUERY_PARAM = re.compile(r"^[A-Za-z0-9._~\-\[\]]+$")


class CrawlMode(enum.StrEnum):
    LIST = "list"
    SITE = "site"


@dataclass(frozen=True, kw_only=True)
class PathPattern:
    """A glob over a URL's path (and query, when it has one): `*` matches within a path segment,
    `**` across segments, `?` one character other than `/`. It must start with `/`."""

    glob: str
    regex: re.Pattern[str] = field(compare=False, repr=False)

    @classmethod
    def parse(cls, glob: str, *, field_name: str) -> PathPattern:
        if not glob:
            raise InvalidInputError(field_name, "a pattern is empty")
        if len(glob) > MAX_PATTERN_LENGTH:
            raise InvalidInputError(field_name, f"pattern longer than {MAX_PATTERN_LENGTH} characters: {glob[:60]}...")
        if not glob.startswith("/"):
            raise InvalidInputError(field_name, f"pattern {glob!r} must start with / (it matches the URL's path)")
        if any(ch.isspace() or ord(ch) < 32 for ch in glob):
            raise InvalidInputError(field_name, f"pattern {glob!r} contains spaces or control characters")
        if "***" in glob:
            raise InvalidInputError(field_name, f"pattern {glob!r}: use * within a segment or ** across segments")
        return cls(glob=glob, regex=re.compile(_translate(glob)))

    def matches(self, path_and_query: str) -> bool:
        return self.regex.fullmatch(path_and_query) is not None


def _translate(glob: str) -> str:
    parts, index = [], 0
    while index < len(glob):
        if glob.startswith("**", index):
            parts.append(".*")
            index += 2
        elif glob[index] == "*":
            parts.append("[^/]*")
            index += 1
        elif glob[index] == "?":
            parts.append("[^/]")
            index += 1
        else:
            parts.append(re.escape(glob[index]))
            index += 1
    return "".join(parts)


@dataclass(frozen=True, kw_only=True)
class SiteConfig:
    """The bounds of a site crawl. `drop_query_params` names query parameters removed from every
    discovered URL before de-duplication (tracking parameters, session ids); `drop_all_query`
    removes the whole query."""

    start_urls: tuple[str, ...]
    max_depth: int = DEFAULT_MAX_DEPTH
    max_pages: int = DEFAULT_MAX_PAGES
    include: tuple[PathPattern, ...] = ()
    exclude: tuple[PathPattern, ...] = ()
    subdomains: bool = False
    drop_query_params: frozenset[str] = frozenset()
    drop_all_query: bool = False

    def allows_path(self, path_and_query: str) -> bool:
        """Inside the include patterns (any, when there are none) and outside every exclude pattern."""
        included = not self.include or any(pattern.matches(path_and_query) for pattern in self.include)
        return included and not any(pattern.matches(path_and_query) for pattern in self.exclude)

    def to_config(self) -> dict[str, Any]:
        """The JSON stored in the connector's config under SITE_KEY."""
        return {
            "start_urls": list(self.start_urls),
            "max_depth": self.max_depth,
            "max_pages": self.max_pages,
            "include": [pattern.glob for pattern in self.include],
            "exclude": [pattern.glob for pattern in self.exclude],
            "subdomains": self.subdomains,
            "drop_query_params": ALL_QUERY_PARAMS if self.drop_all_query else sorted(self.drop_query_params),
        }

    @classmethod
    def validated(
        cls,
        *,
        start_urls: Iterable[str],
        max_depth: int | None = None,
        max_pages: int | None = None,
        include: Iterable[str] = (),
        exclude: Iterable[str] = (),
        subdomains: bool = False,
        drop_query_params: str | Iterable[str] | None = None,
        max_pages_cap: int = DEFAULT_MAX_PAGES_CAP,
    ) -> SiteConfig:
        """A site config from user input; InvalidInputError naming the field of the first bad value.

        Field names are the CLI's and the API's: site, max_depth, max_pages, include, exclude,
        drop_query_params. `drop_query_params` is "all", or names (a list, or one comma-separated string).
        """
        urls = tuple(validate_urls(start_urls, field="site"))
        for url in urls:
            if normalize_url(url) is None:
                raise InvalidInputError("site", f"{url!r} is not a URL a crawl can start from; check its host name")
        depth = DEFAULT_MAX_DEPTH if max_depth is None else _bounded_int(max_depth, "max_depth", 0, MAX_DEPTH)
        pages = DEFAULT_MAX_PAGES if max_pages is None else _bounded_int(max_pages, "max_pages", 1, max_pages_cap)
        drop_all, names = _query_params(drop_query_params)
        return cls(
            start_urls=urls,
            max_depth=depth,
            max_pages=min(pages, max_pages_cap),
            include=_patterns(include, "include"),
            exclude=_patterns(exclude, "exclude"),
            subdomains=bool(subdomains),
            drop_query_params=names,
            drop_all_query=drop_all,
        )

    @classmethod
    def read(cls, stored: Mapping[str, Any], *, max_pages_cap: int = DEFAULT_MAX_PAGES_CAP) -> SiteConfig:
        """The stored config, validated like new input: a row written by hand or an older release."""
        return cls.validated(
            start_urls=stored.get("start_urls") or [],
            max_depth=stored.get("max_depth"),
            max_pages=min(int(stored.get("max_pages") or DEFAULT_MAX_PAGES), max_pages_cap),
            include=stored.get("include") or (),
            exclude=stored.get("exclude") or (),
            subdomains=bool(stored.get("subdomains")),
            drop_query_params=stored.get("drop_query_params"),
            max_pages_cap=max_pages_cap,
        )


def site_for(
    mode: str | None,
    *,
    start_urls: Iterable[str] = (),
    max_depth: int | None = None,
    max_pages: int | None = None,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    subdomains: bool = False,
    drop_query_params: str | Iterable[str] | None = None,
    max_pages_cap: int = DEFAULT_MAX_PAGES_CAP,
) -> SiteConfig | None:
    """The site crawl a new web connector asks for, or None for a list crawl.

    Start URLs (or mode "site") ask for one; bounds without it are refused, since a list crawl
    would silently ignore them. InvalidInputError names the field.
    """
    start_urls, include, exclude = list(start_urls), list(include), list(exclude)
    chosen = validate_choice(CrawlMode, mode, field="mode", what="crawl mode") if mode is not None else None
    if chosen is CrawlMode.SITE or (chosen is None and start_urls):
        return SiteConfig.validated(
            start_urls=start_urls,
            max_depth=max_depth,
            max_pages=max_pages,
            include=include,
            exclude=exclude,
            subdomains=subdomains,
            drop_query_params=drop_query_params,
            max_pages_cap=max_pages_cap,
        )
    given = {
        "site": bool(start_urls),
        "max_depth": max_depth is not None,
        "max_pages": max_pages is not None,
        "include": bool(include),
        "exclude": bool(exclude),
        "subdomains": subdomains,
        "drop_query_params": drop_query_params is not None,
    }
    if bounding := [name for name, is_given in given.items() if is_given]:
        raise InvalidInputError(bounding[0], "bounds a site crawl, and this connector crawls a list (mode list)")
    return None


def crawl_mode(config: Mapping[str, Any]) -> CrawlMode:
    """A connector's crawl mode from its config; list when none is stored."""
    return validate_choice(CrawlMode, config.get(CRAWL_MODE_KEY, CrawlMode.LIST.value), field="mode", what="crawl mode")


def _bounded_int(value: object, field_name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(field_name, f"must be a whole number, got {value!r}")
    if not low <= value <= high:
        raise InvalidInputError(field_name, f"must be between {low} and {high}, got {value}")
    return value


def _patterns(globs: Iterable[str], field_name: str) -> tuple[PathPattern, ...]:
    if isinstance(globs, str):
        globs = [globs]
    patterns = tuple(dict.fromkeys(PathPattern.parse(glob, field_name=field_name) for glob in globs))
    if len(patterns) > MAX_PATTERNS:
        raise InvalidInputError(field_name, f"at most {MAX_PATTERNS} patterns, got {len(patterns)}")
    return patterns


def _query_params(value: str | Iterable[str] | None) -> tuple[bool, frozenset[str]]:
    if value is None:
        return False, frozenset()
    names = [part.strip() for part in value.split(",")] if isinstance(value, str) else list(value)
    if names == [ALL_QUERY_PARAMS]:
        return True, frozenset()
    if ALL_QUERY_PARAMS in names:
        raise InvalidInputError("drop_query_params", "give all alone, or parameter names without all")
    for name in names:
        if not isinstance(name, str) or not _QUERY_PARAM.match(name):
            raise InvalidInputError(
                "drop_query_params", f"{name!r} is not a query parameter name; give names like utm_source, or all"
            )
    return False, frozenset(names)
