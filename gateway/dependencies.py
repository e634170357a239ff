"""What handlers are given: the services built in the app's lifespan and the caller (see ``app._dependencies``)."""

from __future__ import annotations

from typing import TypeAlias

from litestar.di import NamedDependency

from auth import Principal
from gateway.routing import ModelRouter
from gateway.tenancy import Tenancy

__all__ = ["Caller", "Router", "Tenants"]

Caller: TypeAlias = NamedDependency[Principal]
"""The authenticated caller (provided as ``principal``)."""
Router: TypeAlias = NamedDependency[ModelRouter]
Tenants: TypeAlias = NamedDependency[Tenancy]
