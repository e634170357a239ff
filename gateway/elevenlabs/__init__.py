"""ElevenLabs' API (issue #34): its REST text-to-speech, voice and pronunciation dictionary routes, so that code
written for ElevenLabs (its SDKs, the voice stacks built on them) works here with only its base URL changed.
``docs/elevenlabs.md`` says what works.

A protocol adapter, as every transport is: the routes translate ElevenLabs' requests into the gateway's own and speak
through the one speech pipeline (:meth:`SpeechService.speak`); their errors go through one table of their own
(``errors.py``), scoped to these routes. Callers authenticate with ElevenLabs' ``xi-api-key`` header or
``Authorization`` (``gateway/http/auth/security.py``), as tenants, keys and JWTs of the gateway.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from litestar import Router

from gateway.elevenlabs.account import AccountController, unserved_elevenlabs_route
from gateway.elevenlabs.dialogue import TextToDialogueController
from gateway.elevenlabs.dialogue_socket import dialogue_multi_stream_input, dialogue_stream_input
from gateway.elevenlabs.dictionaries import PronunciationDictionariesController, pronunciation_file_router
from gateway.elevenlabs.errors import EXCEPTION_HANDLERS, refusal_body
from gateway.elevenlabs.speech import TextToSpeechController
from gateway.elevenlabs.voices import VoicesController
from gateway.elevenlabs.websocket import multi_stream_input, stream_input
from gateway.http.connection_refusals import REFUSAL_BODY

if TYPE_CHECKING:
    from gateway.settings import Settings

__all__ = ["elevenlabs_router"]

_SOCKETS = [multi_stream_input, stream_input, dialogue_multi_stream_input, dialogue_stream_input]


def elevenlabs_router(settings: Settings) -> Router:
    """ElevenLabs' routes, answering every error in ElevenLabs' shape (a front gateway's only: an engine node serves
    its front gateways, which speak OpenAI's API to it): with its text-to-speech and text-to-dialogue WebSockets where
    the realtime endpoints are enabled, and ``add-from-file`` taking files of ``pronunciation.max_file_bytes``."""
    websockets = settings.realtime.enabled
    return Router(
        path="/",
        route_handlers=[
            TextToSpeechController,
            TextToDialogueController,
            VoicesController,
            PronunciationDictionariesController,
            pronunciation_file_router(settings.pronunciation.max_file_bytes),
            AccountController,
            unserved_elevenlabs_route,
            *(_SOCKETS if websockets else []),
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        opt={REFUSAL_BODY: refusal_body},  # and what the HTTP protocol refuses before the app sees the request
        tags=["ElevenLabs"],  # every route of the family, in the OpenAPI document
    )
