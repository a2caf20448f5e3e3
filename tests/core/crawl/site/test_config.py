"""Site-crawl config: what bounds a discovery, validated with the field named."""

from __future__ import annotations

import pytest

from pipelines_dagster.core.crawl.site.config import CrawlMode, PathPattern, SiteConfig, crawl_mode
from pipelines_dagster.core.errors import InvalidInputError


def test_globs_match_within_a_segment_across_segments_and_one_character():
    docs = PathPattern.parse("/docs/*", field_name="include")
    deep = PathPattern.parse("/docs/**", field_name="include")
    one = PathPattern.parse("/v?/api", field_name="include")
    assert docs.matches("/docs/intro") and not docs.matches("/docs/a/b")
    assert deep.matches("/docs/a/b?page=2") and not deep.matches("/blog/docs/a")
    assert one.matches("/v2/api") and not one.matches("/v10/api") and not one.matches("/v//api")
    assert PathPattern.parse("/a.b+(c)", field_name="include").matches("/a.b+(c)")  # regex characters are literal


def test_include_and_exclude_bound_the_paths():
    config = SiteConfig.validated(
        start_urls=["https://docs.example.com/"], include=["/docs/**", "/"], exclude=["/docs/private/**"]
    )
    assert config.allows_path("/") and config.allows_path("/docs/a")
    assert not config.allows_path("/docs/private/x") and not config.allows_path("/blog/")
    assert SiteConfig.validated(start_urls=["https://e.com/"]).allows_path("/anything")


def test_a_config_round_trips_through_its_stored_form():
    config = SiteConfig.validated(
        start_urls=["https://docs.example.com/", "https://docs.example.com/"],
        max_depth=0,
        max_pages=50,
        include=["/docs/**"],
        exclude=["/docs/old/*"],
        subdomains=True,
        drop_query_params="utm_source, utm_medium",
    )
    assert config.start_urls == ("https://docs.example.com/",)
    assert config.drop_query_params == {"utm_source", "utm_medium"}
    assert SiteConfig.read(config.to_config()) == config
    everything = SiteConfig.validated(start_urls=["https://e.com/"], drop_query_params="all")
    assert everything.drop_all_query and SiteConfig.read(everything.to_config()) == everything


def test_a_stored_max_pages_above_todays_cap_is_lowered_to_it():
    stored = SiteConfig.validated(start_urls=["https://e.com/"], max_pages=5000).to_config()
    assert SiteConfig.read(stored, max_pages_cap=100).max_pages == 100


@pytest.mark.parametrize(
    ("given", "field"),
    [
        ({"start_urls": []}, "site"),
        ({"start_urls": ["ftp://e.com/"]}, "site"),
        ({"start_urls": ["https://ex!ample.com/"]}, "site"),
        ({"max_depth": -1}, "max_depth"),
        ({"max_depth": 21}, "max_depth"),
        ({"max_depth": "3"}, "max_depth"),
        ({"max_pages": 0}, "max_pages"),
        ({"max_pages": 10_001}, "max_pages"),
        ({"include": ["docs/*"]}, "include"),
        ({"include": [""]}, "include"),
        ({"exclude": ["/a b"]}, "exclude"),
        ({"exclude": ["/***"]}, "exclude"),
        ({"include": [f"/{n}" for n in range(51)]}, "include"),
        ({"drop_query_params": "utm source"}, "drop_query_params"),
        ({"drop_query_params": ["all", "x"]}, "drop_query_params"),
    ],
)
def test_bad_input_is_refused_naming_the_field(given, field):
    with pytest.raises(InvalidInputError) as raised:
        SiteConfig.validated(**({"start_urls": ["https://e.com/"]} | given))
    assert raised.value.field == field


def test_the_mode_defaults_to_list_and_an_unknown_one_is_refused():
    assert crawl_mode({}) is CrawlMode.LIST
    assert crawl_mode({"CRAWL_MODE": "site"}) is CrawlMode.SITE
    with pytest.raises(InvalidInputError, match="unknown crawl mode 'spider'") as raised:
        crawl_mode({"CRAWL_MODE": "spider"})
    assert raised.value.field == "mode"
