"""A connector's user agent and robots.txt setting, kept in its config (neither is a secret), and the hosts on which
its crawls may ignore robots.txt: those it crawls that its workspace declares it owns, as they are when it runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pipelines_dagster.app_db.models import Connector, Workspace
from pipelines_dagster.core.catalog.changes import Keep
from pipelines_dagster.core.crawl.etiquette import (
    ROBOTS_KEY,
    USER_AGENT_KEY,
    RobotsMode,
    check_robots_waiver,
    hosts_of,
    robots_of,
    validate_robots,
    validate_user_agent,
)


@dataclass(frozen=True)
class OwnUrls:
    """The URLs a connector itself names (a list's, or a site's start URLs) and whether its site takes
    subdomains: what its credentials and its robots.txt setting are judged by."""

    urls: Sequence[str]
    subdomains: bool = False


def set_etiquette(
    connector: Connector,
    workspace: Workspace,
    own: OwnUrls,
    *,
    user_agent: str | Keep | None,
    robots: str | Keep | None,
    urls_changed: str | None = "urls",
) -> None:
    """Set what is given (None: the default again, the crawler's user agent or obeying robots.txt). A robots
    setting given, or kept across a change of the connector's URLs (`urls_changed` names the field that
    changed them), is checked against its hosts as they are now: a change of URLs that would ignore robots.txt
    on a host the workspace does not own is refused too."""
    config = dict(connector.config)
    if not isinstance(user_agent, Keep):
        config.pop(USER_AGENT_KEY, None)
        if user_agent is not None:
            config[USER_AGENT_KEY] = validate_user_agent(user_agent)
    if not isinstance(robots, Keep):
        config.pop(ROBOTS_KEY, None)
        # Stored only when waived: obeying is every connector's default.
        if robots is not None and validate_robots(robots) is RobotsMode.IGNORE:
            config[ROBOTS_KEY] = RobotsMode.IGNORE.value
    field = "robots" if not isinstance(robots, Keep) else urls_changed
    if robots_of(config) is RobotsMode.IGNORE and field is not None:
        check_robots_waiver(hosts_of(own.urls), owned=workspace.owned_hosts, subdomains=own.subdomains, field=field)
    connector.config = config


def robots_waived_on(connector: Connector, workspace: Workspace, own: OwnUrls) -> frozenset[str]:
    """The hosts the connector's crawls may fetch without robots.txt: none unless it is set to ignore it, and then
    only those of its hosts the workspace owns now (a host given up since is obeyed again)."""
    if robots_of(connector.config) is not RobotsMode.IGNORE or own.subdomains:
        return frozenset()
    return hosts_of(own.urls) & frozenset(workspace.owned_hosts)
