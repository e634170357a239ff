"""``ListPage.of`` and ``ListPage.of_records``: a page in OpenAI's list shape, bounded by its items' ids
(``gateway/schemas.py``)."""

from __future__ import annotations

import json

from gateway.routes.admin import KeyList, KeyObject
from storage import Page


def _key(key_id: str) -> KeyObject:
    return KeyObject(id=key_id, tenant="acme", created_at=0.0, revoked=False, hint="")


def test_a_page_is_bounded_by_its_first_and_last_items() -> None:
    page = KeyList.of([_key("k1"), _key("k2"), _key("k3")], has_more=True)
    body = json.loads(page.model_dump_json())
    assert [body["object"], body["first_id"], body["last_id"], body["has_more"]] == ["list", "k1", "k3", True]
    assert [item["id"] for item in body["data"]] == ["k1", "k2", "k3"]


def test_an_empty_page_has_no_bounds() -> None:
    page = KeyList.of([], has_more=False)
    assert json.loads(page.model_dump_json()) == {
        "object": "list",
        "data": [],
        "first_id": None,
        "last_id": None,
        "has_more": False,
    }


def test_a_stores_page_is_shown_record_by_record() -> None:
    records = Page([("k1", 1.0), ("k2", 2.0)], has_more=True)
    page = KeyList.of_records(
        records, lambda record: KeyObject(id=record[0], tenant="acme", created_at=record[1], revoked=False, hint="")
    )
    body = json.loads(page.model_dump_json())
    assert [body["first_id"], body["last_id"], body["has_more"]] == ["k1", "k2", True]
    assert [(item["id"], item["created_at"]) for item in body["data"]] == [("k1", 1.0), ("k2", 2.0)]


def test_an_empty_stores_page_is_an_empty_listing() -> None:
    empty: Page[str] = Page([], has_more=False)
    page = KeyList.of_records(empty, _key)
    assert json.loads(page.model_dump_json())["data"] == []
    assert (page.first_id, page.last_id, page.has_more) == (None, None, False)
