"""Fixtures shared by every suite: a real redis-server (``tests/redis_server.py``)."""

pytest_plugins = ["tests.redis_server"]
