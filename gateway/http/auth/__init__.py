"""Who is calling, for Litestar: the ``principal`` dependency, the admin guard, the credential throttles, an engine
node's service token, and the named dependencies of handlers (see ``gateway/http/__init__.py``)."""
