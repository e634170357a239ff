"""The HTTP edge, in two parts.

Transport guards, in this package: what holds for every connection whoever sends it, before and around the
application (connection and body caps, ``connection_limits.py``; slow readers, ``backpressure.py``; JSON nesting,
``json_depth.py``; clients that hang up, ``disconnect.py``; request ids and the access log, ``tracking.py``; the
client's address, ``client_address.py``), the refusals the guards raise (``refusals.py``) and OpenAI's table that
answers them and every domain error in its error body (``errors.py``; ElevenLabs' routes answer them from their own,
``gateway/elevenlabs/errors.py``). They know no caller; the connection layer, refusing before any route is known,
answers in OpenAI's body.

Authentication glue, in ``auth/``: who is calling (``auth/security.py``, authenticated from the head before the body,
``auth/early_auth.py``, throttled per address, ``auth/credential_throttle.py``; an engine node's service token,
``auth/service_token.py``) and what handlers are given by name (``auth/dependencies.py``). It ties the ``auth``
package to Litestar, and is handed the services: neither part imports the composition root (``gateway/app.py``,
``gateway/services.py``), and the transport guards never import the glue (both in ``pyproject.toml``'s contracts).
"""
