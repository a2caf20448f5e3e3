"""What every database stores: NUL and lone surrogates out, all other text untouched."""

from __future__ import annotations

import hashlib

from pipelines_dagster.app_db.text import storable, storable_json
from pipelines_dagster.core.crawl.extract.page import extract_page


def test_nul_and_lone_surrogates_are_removed():
    assert storable("a\x00b\ud800c\udfffd\x00") == "abcd"


def test_other_text_is_returned_unchanged():
    text = "Café \t\x01\x7f \ufffd \uffff 😀 \U0010ffff \u200b line\r\n"
    assert storable(text) == text


def test_every_string_of_a_json_value_is_made_storable_keys_included():
    value = {"ti\x00tle": "A\x00", "tags": ["x\ud800", ("y", 1)], "n": 2, "ok": True, "none": None, "f": 1.5}
    assert storable_json(value) == {"title": "A", "tags": ["x", ["y", 1]], "n": 2, "ok": True, "none": None, "f": 1.5}


def test_extraction_keeps_the_hash_of_text_without_nul_and_drops_nul():
    plain = extract_page(b"Release notes\nFixed it.\n", media_type="text/plain", charset="utf-8", url="https://a/")
    assert plain.content_hash == hashlib.sha256(b"Release notes\nFixed it.").hexdigest()
    nul = extract_page(
        b"Release\x00 notes\nFixed it.\x00\n", media_type="text/plain", charset="utf-8", url="https://a/"
    )
    assert nul.content == "Release notes\nFixed it.\n"
    assert nul.content_hash == plain.content_hash
