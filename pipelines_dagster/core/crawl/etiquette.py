"""How a connector's crawls present themselves and which rules they keep: the user agent they send (the crawler's
unless the connector names its own), and whether they obey robots.txt, which only a workspace's own hosts may
waive: a site's owner may crawl it as it likes, nobody else's."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

from pipelines_dagster.core.crawl.urls import host_of, normalize_url
from pipelines_dagster.core.errors import InvalidInputError
from pipelines_dagster.core.validation import validate_choice

USER_AGENT_KEY = "USER_AGENT"
ROBOTS_KEY = "ROBOTS"
MAX_USER_AGENT_LENGTH = 256
MAX_OWNED_HOSTS = 100
# Visible ASCII with inner spaces: a User-Agent header that cannot split a request.
_USER_AGENT = re.compile(r"^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$")


class RobotsMode(StrEnum):
    OBEY = "obey"
    IGNORE = "ignore"


def validate_user_agent(value: str) -> str:
    if len(value) > MAX_USER_AGENT_LENGTH or not _USER_AGENT.match(value):
        raise InvalidInputError(
            "user_agent",
            f"a user agent is printable ASCII on one line, {MAX_USER_AGENT_LENGTH} characters at most, e.g. "
            "'acme-kb/1.0 (+https://acme.example/bot)'",
        )
    return value


def user_agent_of(config: Mapping[str, Any]) -> str | None:
    """The connector's own user agent; None: the crawler's."""
    value = config.get(USER_AGENT_KEY)
    return value if isinstance(value, str) else None


def robots_of(config: Mapping[str, Any]) -> RobotsMode:
    """Whether the connector's crawls obey robots.txt; obey unless it was set to ignore."""
    return validate_robots(config.get(ROBOTS_KEY, RobotsMode.OBEY.value))


def validate_robots(value: object) -> RobotsMode:
    return validate_choice(RobotsMode, value, field="robots", what="robots setting")


def validate_host(value: str) -> str:
    """A host name or address, as a crawl's URLs name it (lower case, IDNA); InvalidInputError otherwise."""
    given = value.strip()
    normalized = normalize_url(f"http://{given}/") if given and not set("/:@?#").intersection(given) else None
    if normalized is None:
        raise InvalidInputError(
            "owned_hosts", "a host is a name like docs.example.com (no scheme, port or path) or an address"
        )
    return host_of(normalized)


def validate_owned_hosts(hosts: Iterable[str]) -> list[str]:
    """The hosts a workspace declares it owns, normalized, each once, in order."""
    owned = list(dict.fromkeys(map(validate_host, hosts)))
    if len(owned) > MAX_OWNED_HOSTS:
        raise InvalidInputError("owned_hosts", f"at most {MAX_OWNED_HOSTS} hosts")
    return owned


def hosts_of(urls: Iterable[str]) -> frozenset[str]:
    """The hosts of `urls`, as a crawl's scope names them."""
    return frozenset(host_of(url) for url in map(normalize_url, urls) if url is not None)


def check_robots_waiver(
    hosts: frozenset[str], *, owned: Iterable[str], subdomains: bool, field: str = "robots"
) -> None:
    """Refuse `robots: ignore` for a connector whose `hosts` (a site taking its `subdomains` too) are not all
    hosts its workspace declares it owns, saying which and how to declare them; `field` is what was changed."""
    if subdomains:
        raise InvalidInputError(
            field,
            "robots.txt can be ignored only on hosts the workspace owns, and a site crawl over subdomains reaches "
            "hosts nobody declared: name the hosts as start URLs without --subdomains",
        )
    foreign = sorted(hosts - frozenset(owned))
    if foreign:
        raise InvalidInputError(
            field,
            f"robots.txt can be ignored only on hosts the workspace owns, and it does not own {', '.join(foreign)}: "
            "an operator declares them with `pipelines-dagster workspace update --owned-host HOST`",
        )
