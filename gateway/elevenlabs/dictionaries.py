"""ElevenLabs' pronunciation dictionaries (``/v1/pronunciation-dictionaries``), each the tenant's own.

Created from rules (JSON) or from a W3C PLS file (multipart); listed in cursor pages; read with their latest rules;
changed by adding, removing or setting rules, each change a new ``version_id``; any kept version downloaded as PLS.
Requests apply them with ``pronunciation_dictionary_locators`` (``wire.py``); OpenAI and realtime callers through the
tenant's default dictionaries (``docs/pronunciation.md``). ``workspace_access``, ``sort``, ``sort_direction`` and
``include_archived`` are accepted and ignored: dictionaries belong to one tenant and list oldest first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeAlias

from litestar import Controller, Response, Router, get, post
from litestar.datastructures import UploadFile  # noqa: TC002 - read at runtime, in the form's type
from litestar.di import NamedDependency, Provide
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, JSONBody, Parameter
from litestar.status_codes import HTTP_200_OK, HTTP_400_BAD_REQUEST
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from gateway.elevenlabs.errors import error_response, error_responses
from gateway.elevenlabs.json_body import require_fastapi_json
from gateway.http.auth.dependencies import Caller, PronunciationDep
from gateway.http.errors import OpenAIError
from gateway.text.lexicon import Rule
from gateway.text.pls import ALPHABETS, PLSError, write_pls
from storage import MAX_PAGE

if TYPE_CHECKING:
    from litestar import Request

    from gateway.speech.dictionaries import DictionaryRecord
    from gateway.speech.pronunciation import PronunciationDictionaries

__all__ = ["FORM_ALLOWANCE_BYTES", "PronunciationDictionariesController", "pronunciation_file_router"]

PLS_MEDIA_TYPE = "application/pls+xml"
FORM_ALLOWANCE_BYTES = 64 * 1024
"""What ``add-from-file``'s body may hold beside its PLS file: the name, the description (4,096 characters, up to 4
bytes each), the other fields and the parts' headers, as the voice upload routes allow."""

_Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]
_Description = Annotated[str, StringConstraints(max_length=4096)]
_Grapheme = Annotated[str, StringConstraints(min_length=1, max_length=256)]
_Replacement = Annotated[str, StringConstraints(max_length=1024)]
_ERRORS = error_responses(400, 401, 404, 422)


class AliasRule(BaseModel):
    """Say ``string_to_replace`` as ``alias``."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["alias"]
    string_to_replace: _Grapheme
    alias: _Replacement
    case_sensitive: bool | None = None
    """Default ``true``."""
    word_boundaries: bool | None = None
    """Default ``true``: only where ``string_to_replace`` stands as whole words."""


class PhonemeRule(BaseModel):
    """Pronounce ``string_to_replace`` as ``phoneme`` (in ``alphabet``): no engine here says phoneme strings, so a
    request whose text such a rule matches is refused (400 ``phoneme_not_supported``); give it an alias instead."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["phoneme"]
    string_to_replace: _Grapheme
    phoneme: Annotated[str, StringConstraints(min_length=1, max_length=1024)]
    alphabet: Literal[ALPHABETS]  # type: ignore[valid-type]  # a tuple of literals
    case_sensitive: bool | None = None
    word_boundaries: bool | None = None


PronunciationRule = Annotated[AliasRule | PhonemeRule, Field(discriminator="type")]
_Rules = Annotated[list[PronunciationRule], Field(max_length=100_000)]


class AddFromRules(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: _Name
    rules: _Rules
    description: _Description | None = None
    workspace_access: str | None = None
    """Accepted and ignored."""


@dataclass
class AddFromFile:
    """The form of ``add-from-file``: a PLS lexicon and a name."""

    name: str
    file: UploadFile | None = None
    description: str | None = None
    workspace_access: str | None = None


class AddRules(BaseModel):
    model_config = ConfigDict(extra="ignore")

    rules: _Rules


class RemoveRules(BaseModel):
    model_config = ConfigDict(extra="ignore")

    rule_strings: Annotated[list[_Grapheme], Field(max_length=100_000)]


class AddedDictionary(BaseModel):
    """ElevenLabs' ``AddPronunciationDictionaryResponseModel``."""

    id: str
    name: str
    created_by: str
    """The tenant."""
    creation_time_unix: int
    version_id: str
    version_rules_num: int
    description: str | None
    permission_on_resource: Literal["admin"] = "admin"


class DictionaryMetadata(BaseModel):
    """ElevenLabs' ``GetPronunciationDictionaryMetadataResponse``."""

    id: str
    latest_version_id: str
    latest_version_rules_num: int
    name: str
    permission_on_resource: Literal["admin"] = "admin"
    created_by: str
    creation_time_unix: int
    archived_time_unix: int | None = None
    description: str | None


class AliasRuleOut(BaseModel):
    type: Literal["alias"] = "alias"
    string_to_replace: str
    case_sensitive: bool
    word_boundaries: bool
    alias: str


class PhonemeRuleOut(BaseModel):
    type: Literal["phoneme"] = "phoneme"
    string_to_replace: str
    case_sensitive: bool
    word_boundaries: bool
    phoneme: str
    alphabet: str


class DictionaryWithRules(DictionaryMetadata):
    """ElevenLabs' ``GetPronunciationDictionaryWithRulesResponseModel``: a PLS lexeme with both an alias and a
    phoneme is shown as its alias rule."""

    rules: list[AliasRuleOut | PhonemeRuleOut]


class DictionaryPage(BaseModel):
    """ElevenLabs' ``GetPronunciationDictionariesMetadataResponseModel``: the next page is ``?cursor=<next_cursor>``
    while ``has_more``."""

    pronunciation_dictionaries: list[DictionaryMetadata]
    next_cursor: str | None
    has_more: bool


class RulesChanged(BaseModel):
    """ElevenLabs' ``PronunciationDictionaryRulesResponseModel``: the new version."""

    id: str
    version_id: str
    version_rules_num: int


def _rule(rule: AliasRule | PhonemeRule) -> Rule:
    sensitive, bounded = rule.case_sensitive is not False, rule.word_boundaries is not False
    if isinstance(rule, AliasRule):
        return Rule(rule.string_to_replace, alias=rule.alias, case_sensitive=sensitive, word_boundaries=bounded)
    return Rule(
        rule.string_to_replace,
        phoneme=rule.phoneme,
        alphabet=rule.alphabet,
        case_sensitive=sensitive,
        word_boundaries=bounded,
    )


def _rules(rules: list[AliasRule | PhonemeRule]) -> list[Rule]:
    return [_rule(rule) for rule in rules]


def _rule_out(rule: Rule) -> AliasRuleOut | PhonemeRuleOut:
    sensitive, bounded = rule.case_sensitive, rule.word_boundaries
    if rule.alias is not None:
        return AliasRuleOut(
            string_to_replace=rule.grapheme, alias=rule.alias, case_sensitive=sensitive, word_boundaries=bounded
        )
    return PhonemeRuleOut(
        string_to_replace=rule.grapheme,
        phoneme=rule.phoneme or "",
        alphabet=rule.alphabet or "ipa",
        case_sensitive=sensitive,
        word_boundaries=bounded,
    )


def _added(record: DictionaryRecord) -> AddedDictionary:
    return AddedDictionary(
        id=record.id,
        name=record.name,
        created_by=record.tenant,
        creation_time_unix=int(record.created_at),
        version_id=record.version_id,
        version_rules_num=len(record.rules),
        description=record.description,
    )


def _metadata(record: DictionaryRecord) -> DictionaryMetadata:
    return DictionaryMetadata(
        id=record.id,
        latest_version_id=record.version_id,
        latest_version_rules_num=len(record.rules),
        name=record.name,
        created_by=record.tenant,
        creation_time_unix=int(record.created_at),
        description=record.description,
    )


def _changed(record: DictionaryRecord) -> RulesChanged:
    return RulesChanged(id=record.id, version_id=record.version_id, version_rules_num=len(record.rules))


async def _read_file(upload: UploadFile | None, dictionaries: PronunciationDictionaries) -> list[Rule]:
    max_bytes = dictionaries.max_file_bytes
    if upload is None:
        raise OpenAIError(HTTP_400_BAD_REQUEST, "A PLS file is required (form field `file`).", param="file")
    data = await upload.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise OpenAIError(
            HTTP_400_BAD_REQUEST, f"The PLS file is over {max_bytes} bytes.", param="file", code="file_too_large"
        )
    try:
        return await dictionaries.file_rules(data)
    except PLSError as exc:
        raise OpenAIError(HTTP_400_BAD_REQUEST, f"Invalid PLS file: {exc}", param="file", code="invalid_pls") from None


DictionaryPath = Annotated[str, Parameter(description="The dictionary's id (`pd_…`).", max_length=256)]
Cursor = Annotated[str | None, Parameter(description="A page's `next_cursor`.", max_length=256)]
Ignored = Annotated[str | None, Parameter(description="Accepted and ignored: oldest first.", max_length=64)]
PageSize = Annotated[int, Parameter(description="Dictionaries per page.", ge=1, le=MAX_PAGE)]


Tenant: TypeAlias = NamedDependency[str]
"""The caller's tenant's name (provided as ``tenant``): whose dictionaries these routes read and change."""


def _tenant(principal: Caller) -> str:
    return principal.tenant.name


def _form_text_error(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """Litestar decodes the form's text fields before the handler runs: one not in its charset (or in a charset Python
    does not know) is the caller's 400, not a 500. Any other lookup error is answered as it would be elsewhere."""
    if isinstance(exc, UnicodeDecodeError) or "unknown encoding" in str(exc):
        exc = OpenAIError(HTTP_400_BAD_REQUEST, "A text field of the form is not valid text.")
    return error_response(request, exc)


class PronunciationFileController(Controller):
    """``add-from-file``, apart from the other routes: its body is as large as its PLS file may be
    (:func:`pronunciation_file_router`), theirs the server's ``max_body_bytes``."""

    path = "/v1/pronunciation-dictionaries"
    dependencies = {"tenant": Provide(_tenant, sync_to_thread=False)}  # noqa: RUF012 - Litestar's declared type

    @post(
        "/add-from-file",
        status_code=HTTP_200_OK,
        operation_id="elevenLabsAddDictionaryFromFile",
        responses=_ERRORS,
        exception_handlers=dict.fromkeys([UnicodeDecodeError, LookupError], _form_text_error),
    )
    async def add_from_file(
        self,
        data: Annotated[AddFromFile, Body(media_type=RequestEncodingType.MULTI_PART)],
        tenant: Tenant,
        pronunciation: PronunciationDep,
    ) -> AddedDictionary:
        if not 1 <= len(data.name) <= 256:
            raise OpenAIError(HTTP_400_BAD_REQUEST, "`name` must have 1 to 256 characters.", param="name")
        rules = await _read_file(data.file, pronunciation)
        description = (data.description or None) and data.description[:4096]
        return _added(await pronunciation.create(tenant, data.name, description, rules))


def pronunciation_file_router(max_file_bytes: int) -> Router:
    """``add-from-file`` taking bodies of a ``max_file_bytes`` PLS file and the rest of its form
    (:data:`FORM_ALLOWANCE_BYTES`): under the server's ``max_body_bytes`` (64 KiB), a file of 1 MiB, the documented
    ``pronunciation.max_file_bytes``, was refused 413 (issue #47). A file over ``max_file_bytes`` in a body within it
    is a 400 ``file_too_large``; a larger body a 413."""
    return Router(
        path="/",
        route_handlers=[PronunciationFileController],
        request_max_body_size=max_file_bytes + FORM_ALLOWANCE_BYTES,
    )


def _rules_route(action: str, operation_id: str) -> post:
    """The declaration of a route that changes a dictionary's rules (``add-rules``...): a new version."""
    return post(
        f"/{{dictionary_id:str}}/{action}",
        status_code=HTTP_200_OK,
        operation_id=operation_id,
        before_request=require_fastapi_json,
        responses=_ERRORS,
    )


class PronunciationDictionariesController(Controller):
    path = "/v1/pronunciation-dictionaries"
    dependencies = {"tenant": Provide(_tenant, sync_to_thread=False)}  # noqa: RUF012 - Litestar's declared type

    @post(
        "/add-from-rules",
        status_code=HTTP_200_OK,
        operation_id="elevenLabsAddDictionaryFromRules",
        before_request=require_fastapi_json,
        responses=_ERRORS,
    )
    async def add_from_rules(
        self, data: JSONBody[AddFromRules], tenant: Tenant, pronunciation: PronunciationDep
    ) -> AddedDictionary:
        rules = _rules(data.rules)
        return _added(await pronunciation.create(tenant, data.name, data.description, rules))

    @get("/", operation_id="elevenLabsListDictionaries", responses=_ERRORS)
    async def list_dictionaries(  # noqa: PLR0917 - Litestar's parameters
        self,
        tenant: Tenant,
        pronunciation: PronunciationDep,
        cursor: Cursor = None,
        page_size: PageSize = 30,
        sort: Ignored = None,
        sort_direction: Ignored = None,
        include_archived: Annotated[bool | None, Parameter(description="Accepted and ignored.")] = None,
    ) -> DictionaryPage:
        page = await pronunciation.store.page(tenant, after=cursor, limit=page_size)
        next_cursor = page.data[-1].id if page.has_more and page.data else None
        return DictionaryPage(
            pronunciation_dictionaries=[_metadata(r) for r in page.data],
            next_cursor=next_cursor,
            has_more=page.has_more,
        )

    @get("/{dictionary_id:str}", operation_id="elevenLabsGetDictionary", responses=_ERRORS)
    async def get_dictionary(
        self, dictionary_id: DictionaryPath, tenant: Tenant, pronunciation: PronunciationDep
    ) -> DictionaryWithRules:
        record = await pronunciation.get(tenant, dictionary_id)
        return DictionaryWithRules(**_metadata(record).model_dump(), rules=[_rule_out(r) for r in record.rules])

    @_rules_route("add-rules", "elevenLabsAddRules")
    async def add_rules(
        self, dictionary_id: DictionaryPath, data: JSONBody[AddRules], tenant: Tenant, pronunciation: PronunciationDep
    ) -> RulesChanged:
        return _changed(await pronunciation.add_rules(tenant, dictionary_id, _rules(data.rules)))

    @_rules_route("set-rules", "elevenLabsSetRules")
    async def set_rules(
        self, dictionary_id: DictionaryPath, data: JSONBody[AddRules], tenant: Tenant, pronunciation: PronunciationDep
    ) -> RulesChanged:
        return _changed(await pronunciation.set_rules(tenant, dictionary_id, _rules(data.rules)))

    @_rules_route("remove-rules", "elevenLabsRemoveRules")
    async def remove_rules(
        self,
        dictionary_id: DictionaryPath,
        data: JSONBody[RemoveRules],
        tenant: Tenant,
        pronunciation: PronunciationDep,
    ) -> RulesChanged:
        return _changed(await pronunciation.remove_rules(tenant, dictionary_id, data.rule_strings))

    @get(
        "/{dictionary_id:str}/{version_id:str}/download",
        operation_id="elevenLabsDownloadDictionary",
        responses=_ERRORS,
        media_type=PLS_MEDIA_TYPE,
    )
    async def download(
        self,
        dictionary_id: FromPath[str],
        version_id: FromPath[str],
        tenant: Tenant,
        pronunciation: PronunciationDep,
    ) -> Response[bytes]:
        rules = await pronunciation.version_rules(tenant, dictionary_id, version_id)
        headers = {"content-disposition": f'attachment; filename="{dictionary_id}-{version_id}.pls"'}
        return Response(write_pls(rules), media_type=PLS_MEDIA_TYPE, headers=headers)
