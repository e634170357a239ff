"""``POST /v1/pronunciation-dictionaries/add-from-file`` refuses a form whose text fields are not text with ElevenLabs'
400, not a 500: Litestar decodes them before the handler runs (found by tests/e2e/test_schema_fuzz.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
from litestar.testing import AsyncTestClient

from tests.inprocess import in_process_app

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

BOUNDARY = "cb81e9778363c898f720c330bd6767bb"
ROUTE = "/v1/pronunciation-dictionaries/add-from-file"


def form(name: bytes, charset: str = "") -> bytes:
    part_type = f"Content-Type: text/plain; charset={charset}\r\n" if charset else ""
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="name"\r\n{part_type}\r\n'.encode()
        + name
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )


@pytest.fixture(scope="module")
async def client() -> AsyncIterator[AsyncTestClient[Any]]:
    async with AsyncTestClient(app=in_process_app({"engines": {"espeak": {"kind": "espeak"}}})) as test_client:
        yield test_client


@pytest.mark.parametrize(
    ("name", "charset"), [(b"\xff\xfe not UTF-8", ""), (b"brand", "no-such-charset")], ids=["bytes", "charset"]
)
async def test_a_text_field_that_is_not_text_is_a_400(client: AsyncTestClient[Any], name: bytes, charset: str) -> None:
    response = await client.post(
        ROUTE, content=form(name, charset), headers={"content-type": f"multipart/form-data; boundary={BOUNDARY}"}
    )
    assert response.status_code == 400, response.text
    assert response.json()["detail"]["message"] == "A text field of the form is not valid text."
