"""A trigger payload as run metadata shows it: text and lists are summarized like objects."""

from __future__ import annotations

import hashlib

from pipelines_dagster.core.triggers.payloads import MAX_SHOWN_PAYLOAD_BYTES, shown_payload


def test_large_text_and_lists_are_summarized_too():
    text = "é" * MAX_SHOWN_PAYLOAD_BYTES
    assert shown_payload(text[: MAX_SHOWN_PAYLOAD_BYTES // 2]) == text[: MAX_SHOWN_PAYLOAD_BYTES // 2]
    assert shown_payload(text)["bytes"] == 2 * MAX_SHOWN_PAYLOAD_BYTES
    assert shown_payload(text)["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert shown_payload(list(range(10_000)))["items"] == 10_000
