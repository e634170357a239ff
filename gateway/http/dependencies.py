"""What handlers are given, by name: the caller and the services built in the app's lifespan (``gateway/app.py``)."""

from __future__ import annotations

from typing import TypeAlias

from litestar.di import NamedDependency

from auth import AuthStore, Principal
from auth.usage import UsageLedger
from gateway.services import StorageProbe
from gateway.speech.routing import ModelRouter
from gateway.speech.voices import VoiceStore

__all__ = ["AuthStoreDep", "Caller", "Router", "StorageDep", "UsageDep", "VoicesDep"]

Caller: TypeAlias = NamedDependency[Principal]
"""The authenticated caller (provided as ``principal``)."""
Router: TypeAlias = NamedDependency[ModelRouter]
"""Model names to engine pools (provided as ``router``)."""
AuthStoreDep: TypeAlias = NamedDependency[AuthStore]
"""Tenants and API keys (provided as ``auth_store``)."""
UsageDep: TypeAlias = NamedDependency[UsageLedger]
"""Usage per tenant (provided as ``usage``)."""
VoicesDep: TypeAlias = NamedDependency[VoiceStore]
"""Custom voices (provided as ``voices``)."""
StorageDep: TypeAlias = NamedDependency[StorageProbe]
"""Whether the shared Redis answers, for ``/readyz`` (provided as ``storage``)."""
