"""What handlers are given, by name: the caller and the services built in the app's lifespan (``gateway/app.py``)."""

from __future__ import annotations

from typing import Annotated, TypeAlias

from litestar.di import Dependency, NamedDependency
from litestar.params import SkipValidationMarker

from auth import AuthStore, Principal
from auth.usage import UsageLedger
from gateway.speech.consents import ConsentStore
from gateway.speech.pronunciation import PronunciationDictionaries
from gateway.speech.routing import ModelRouter
from gateway.speech.voices import VoiceStore
from gateway.uploads import Uploads
from storage.probe import StorageProbe

__all__ = [
    "AuthStoreDep",
    "Caller",
    "ConsentsDep",
    "PronunciationDep",
    "Router",
    "StorageDep",
    "UploadsDep",
    "UsageDep",
    "VoicesDep",
]

Caller: TypeAlias = NamedDependency[Principal]
"""The authenticated caller (provided as ``principal``)."""
Router: TypeAlias = NamedDependency[ModelRouter]
"""Model names to engine pools (provided as ``router``)."""
# Services are the app's own objects, often typed by a Protocol that cannot be checked at runtime: not validated.
AuthStoreDep: TypeAlias = Annotated[AuthStore, Dependency(kind="named"), SkipValidationMarker()]
"""Tenants and API keys (provided as ``auth_store``)."""
UsageDep: TypeAlias = Annotated[UsageLedger, Dependency(kind="named"), SkipValidationMarker()]
"""Usage per tenant (provided as ``usage``)."""
VoicesDep: TypeAlias = Annotated[VoiceStore, Dependency(kind="named"), SkipValidationMarker()]
"""Custom voices (provided as ``voices``)."""
ConsentsDep: TypeAlias = Annotated[ConsentStore, Dependency(kind="named"), SkipValidationMarker()]
"""Consent recordings (provided as ``consents``)."""
PronunciationDep: TypeAlias = Annotated[PronunciationDictionaries, Dependency(kind="named"), SkipValidationMarker()]
"""Pronunciation dictionaries (provided as ``pronunciation``)."""
StorageDep: TypeAlias = Annotated[StorageProbe, Dependency(kind="named"), SkipValidationMarker()]
"""Whether the shared Redis answers, for ``/readyz`` (provided as ``storage``)."""
UploadsDep: TypeAlias = Annotated[Uploads, Dependency(kind="named"), SkipValidationMarker()]
"""Upload admission and decoding (provided as ``uploads``)."""
