"""The engine node's internal API, for its front gateways alone (``server.profile: engine``): the two-tier extension's
routes beside the node's ``POST /v1/audio/speech`` (``engines/remote/context.py``)."""
