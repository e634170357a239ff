"""``GET /v1/organization/usage/audio_speeches``: OpenAI's Usage API for speech, behind ``auth.admin_token``.

What every tenant (OpenAI's project) spoke, in time buckets of a minute, an hour or a day, optionally grouped by
project, API key and model, in OpenAI's ``page`` / ``bucket`` / ``organization.usage.audio_speeches.result`` objects,
so that the finance tools that read OpenAI's read the gateway's. The buckets come from the usage ledger
(``auth/usage.py``), kept per width for ``BUCKET_RETENTION_S``; they add up to ``GET /v1/usage``'s totals.

The list parameters come as the OpenAI SDK sends them (``group_by[]=model``) or repeated (``group_by=model``).
"""

from __future__ import annotations

import base64
import binascii
import time
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from litestar import Controller, Request, get
from litestar.params import Parameter
from litestar.status_codes import HTTP_400_BAD_REQUEST
from pydantic import BaseModel

from auth.usage import BUCKET_WIDTHS, BucketWidth
from gateway.http.auth.dependencies import AuthStoreDep, UsageDep
from gateway.http.auth.security import require_admin
from gateway.http.errors import OpenAIError, error_responses
from storage import MAX_PAGE

if TYPE_CHECKING:
    from collections.abc import Sequence

    from auth import Tenant
    from auth.store import AuthStore
    from auth.usage import BucketUsage

__all__ = ["BUCKET_LIMITS", "OrganizationUsageController"]

GroupBy = Literal["project_id", "user_id", "api_key_id", "model"]
BUCKET_LIMITS: dict[BucketWidth, tuple[int, int]] = {"1m": (60, 1440), "1h": (24, 168), "1d": (7, 31)}
"""Buckets per page for each width: OpenAI's default and most."""

_DESCRIPTION = (
    "OpenAI's audio speeches usage: characters and requests per time bucket (`bucket_width` `1m`, `1h` or `1d`, the "
    "default; buckets start at whole minutes, hours and days in UTC), for every tenant (`project_id`). "
    "`group_by` (`project_id`, `user_id`, `api_key_id`, `model`, any of them) splits each bucket's result; "
    "`project_ids`, `api_key_ids`, `models` and `user_ids` keep only what matches. Each takes `name[]=value` "
    "(as the OpenAI SDK sends it) or `name=value`, repeated. `limit`: buckets per page (1m: 60 by default, at most "
    "1440; 1h: 24, 168; 1d: 7, 31); the next page is `?page=<next_page>`. Minute buckets are kept 2 days, hour "
    "buckets 35 days, day buckets 400 days."
)


class AudioSpeechesResult(BaseModel):
    """OpenAI's ``organization.usage.audio_speeches.result``: what was spoken in one bucket, for one group. A grouping
    field is set only when the page is grouped by it (``project_id`` is the tenant; the gateway knows no users, so
    ``user_id`` is always ``null``)."""

    object: Literal["organization.usage.audio_speeches.result"] = "organization.usage.audio_speeches.result"
    characters: int
    num_model_requests: int
    project_id: str | None = None
    user_id: str | None = None
    api_key_id: str | None = None
    model: str | None = None


class AudioSpeechesBucket(BaseModel):
    """OpenAI's usage ``bucket``: one time bucket, ``[start_time, end_time)`` in Unix seconds."""

    object: Literal["bucket"] = "bucket"
    start_time: int
    end_time: int
    results: list[AudioSpeechesResult]


class AudioSpeechesPage(BaseModel):
    """OpenAI's usage ``page``: buckets in time order; the next page is ``?page=<next_page>`` while ``has_more``."""

    object: Literal["page"] = "page"
    data: list[AudioSpeechesBucket]
    has_more: bool
    next_page: str | None


class OrganizationUsageController(Controller):
    path = "/v1/organization/usage"
    tags = ["Usage"]  # noqa: RUF012 - Litestar's declared type
    guards = [require_admin]  # noqa: RUF012 - Litestar's declared type

    @get(
        "/audio_speeches",
        operation_id="usageAudioSpeeches",
        summary="Audio speeches usage of the organization, in time buckets.",
        description=_DESCRIPTION,
        responses=error_responses(400, 401, 404, 429, 503),  # 429: too many failed admin tokens from an address
    )
    async def audio_speeches(  # noqa: PLR0917 - OpenAI's parameters
        self,
        request: Request[Any, Any, Any],
        auth_store: AuthStoreDep,
        usage: UsageDep,
        start_time: Annotated[int, Parameter(description="Start (Unix seconds), inclusive.", ge=0)],
        end_time: Annotated[int | None, Parameter(description="End (Unix seconds), exclusive; default now.")] = None,
        bucket_width: Annotated[BucketWidth, Parameter(description="Width of each bucket.")] = "1d",
        limit: Annotated[int | None, Parameter(description="Buckets per page.", ge=1)] = None,
        page: Annotated[str | None, Parameter(description="A page's `next_page`.", max_length=64)] = None,
    ) -> AudioSpeechesPage:
        width_s = BUCKET_WIDTHS[bucket_width]
        if end_time is not None and end_time <= start_time:
            raise OpenAIError(
                HTTP_400_BAD_REQUEST,
                f"Invalid 'end_time': {end_time} is not after 'start_time' ({start_time}).",
                param="end_time",
                code="invalid_value",
            )
        end = int(time.time()) + 1 if end_time is None else end_time  # now: this second's usage too
        first = _page_start(page, bucket_width) if page is not None else start_time // width_s * width_s
        count = min(_limit(bucket_width, limit), max(0, -(-(end - first) // width_s)))
        starts = [first + i * width_s for i in range(count)]
        group_by = set(_listed(request, "group_by", get_args(GroupBy)))
        wanted = _Filters(request)
        tenants = await _tenants(auth_store, wanted.project_ids)
        found = await usage.buckets(tenants, bucket_width, starts) if starts else []
        buckets = [
            AudioSpeechesBucket(
                start_time=start,
                end_time=start + width_s,
                results=_results([e for e in found if e.start == start and wanted.keep(e)], group_by),
            )
            for start in starts
        ]
        following = first + count * width_s
        has_more = following < end
        next_page = _cursor(bucket_width, following) if has_more else None
        return AudioSpeechesPage(data=buckets, has_more=has_more, next_page=next_page)


class _Filters:
    """The page's filters (``project_ids``, ``api_key_ids``, ``models``, ``user_ids``): an empty one keeps all."""

    def __init__(self, request: Request[Any, Any, Any]) -> None:
        self.project_ids = set(_listed(request, "project_ids"))
        self.api_key_ids = set(_listed(request, "api_key_ids"))
        self.models = set(_listed(request, "models"))
        self.user_ids = set(_listed(request, "user_ids"))

    def keep(self, entry: BucketUsage) -> bool:
        if self.user_ids:  # the gateway knows no users: nothing is any user's
            return False
        return (
            (not self.project_ids or entry.tenant in self.project_ids)
            and (not self.api_key_ids or entry.api_key_id in self.api_key_ids)
            and (not self.models or entry.model in self.models)
        )


def _results(entries: Sequence[BucketUsage], group_by: set[str]) -> list[AudioSpeechesResult]:
    """One result per group of ``entries`` (one in all without ``group_by``; none for a bucket with nothing spoken)."""
    groups: dict[tuple[str | None, str | None, str | None], list[int]] = {}
    for entry in entries:
        key = (
            entry.tenant if "project_id" in group_by else None,
            entry.api_key_id if "api_key_id" in group_by else None,
            entry.model if "model" in group_by else None,
        )
        totals = groups.setdefault(key, [0, 0])
        totals[0] += entry.characters
        totals[1] += entry.requests
    return [
        AudioSpeechesResult(
            characters=characters, num_model_requests=requests, project_id=project, api_key_id=key_id, model=model
        )
        for (project, key_id, model), (characters, requests) in sorted(groups.items(), key=lambda item: str(item[0]))
    ]


async def _tenants(auth_store: AuthStore, names: set[str]) -> list[Tenant]:
    """The tenants the page reads: those named, else every tenant (a page of the store at a time)."""
    if names:
        return [tenant for name in sorted(names) if (tenant := await auth_store.get_tenant(name)) is not None]
    tenants: list[Tenant] = []
    after: str | None = None
    while True:
        page = await auth_store.page_tenants(after=after, limit=MAX_PAGE)
        tenants += page.data
        if not page.has_more or not page.data:
            return tenants
        after = page.data[-1].name


def _listed(request: Request[Any, Any, Any], name: str, allowed: Sequence[str] | None = None) -> list[str]:
    """A list parameter, as ``name[]=a&name[]=b`` or ``name=a&name=b``; 400 for a value not ``allowed``."""
    values = [*request.query_params.getall(f"{name}[]", []), *request.query_params.getall(name, [])]
    for value in values:
        if allowed is not None and value not in allowed:
            raise OpenAIError(
                HTTP_400_BAD_REQUEST,
                f"Invalid value for '{name}': '{value}'; expected any of {', '.join(allowed)}.",
                param=name,
                code="invalid_value",
            )
    return values


def _limit(width: BucketWidth, limit: int | None) -> int:
    default, most = BUCKET_LIMITS[width]
    if limit is not None and limit > most:
        raise OpenAIError(
            HTTP_400_BAD_REQUEST,
            f"Invalid 'limit': at most {most} buckets of {width} per page.",
            param="limit",
            code="invalid_value",
        )
    return default if limit is None else limit


def _cursor(width: BucketWidth, start: int) -> str:
    return base64.urlsafe_b64encode(f"bucket:{width}:{start}".encode()).decode().rstrip("=")


def _page_start(page: str, width: BucketWidth) -> int:
    """The first bucket of the page ``page`` (a ``next_page`` of a page of ``width`` buckets) names; 400 for anything
    else (a page of another width would start between buckets)."""
    try:
        kind, of_width, start = base64.urlsafe_b64decode(page + "=" * (-len(page) % 4)).decode().split(":")
        if kind == "bucket" and start.isdigit():
            if of_width == width:
                return int(start)
            message = f"Invalid 'page': a next_page of {of_width} buckets, not {width}."
            raise OpenAIError(HTTP_400_BAD_REQUEST, message, param="page", code="invalid_value")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise OpenAIError(
        HTTP_400_BAD_REQUEST, "Invalid 'page': not a page's next_page.", param="page", code="invalid_value"
    )
