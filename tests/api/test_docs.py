"""The API's own documentation as a client and a browser get it: readable operationIds, and Swagger UI and ReDoc
pages whose every asset the API serves itself, so they work without the internet."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urlsplit

import pytest

OPERATION_ID = re.compile(r"^[a-z][a-z0-9_]*$")


def test_every_operation_id_is_its_functions_readable_unique_name(client):
    document = client.get("/openapi.json").json()
    operations = [
        operation["operationId"]
        for section in ("paths", "webhooks")
        for methods in document[section].values()
        for operation in methods.values()
    ]
    assert [name for name in operations if not OPERATION_ID.match(name)] == []
    assert len(operations) == len(set(operations)), sorted(operations)
    assert [
        name for name in operations if "workspaces_" in name or re.search(r"_(get|post|put|patch|delete)$", name)
    ] == []
    named = {
        (path, method): operation["operationId"]
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    }
    assert named[("/workspaces/{workspace_id}/connectors", "post")] == "create_connector"
    assert named[("/workspaces/{workspace_id}/pipelines/{pipeline_id}/runs", "get")] == "list_pipeline_runs"
    assert named[("/workspaces/{workspace_id}/pipelines/{pipeline_id}/run", "post")] == "run_pipeline"
    assert document["webhooks"]["run.failed"]["post"]["operationId"] == "run_failed"


class _Assets(HTMLParser):
    """Every URL a page loads: scripts, stylesheets, icons, images."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and name in {"src", "href"}:
                self.urls.append(value)


def _loaded(html: str) -> list[str]:
    parser = _Assets()
    parser.feed(html)
    # What the page's script is told to fetch as the document (`url: '/openapi.json'`, `spec-url="..."`).
    return parser.urls + re.findall(r"""url['"]?\s*[:=]\s*['"]([^'"]+)['"]""", html)


@pytest.mark.parametrize(("page", "kinds"), [("/docs", {"javascript", "css"}), ("/redoc", {"javascript"})])
def test_docs_pages_load_only_what_the_api_serves(client, page, kinds):
    answer = client.get(page)
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/html")
    html = answer.text
    assert "http://" not in html and "https://" not in html and "//cdn" not in html
    urls = _loaded(html)
    assert "/openapi.json" in urls
    served = set()
    for url in urls:
        parts = urlsplit(url)
        assert not parts.scheme and not parts.netloc and url.startswith("/"), url
        asset = client.get(url)
        assert asset.status_code == 200, url
        served.add(asset.headers["content-type"].split(";")[0].split("/")[-1])
    assert kinds <= served, served
