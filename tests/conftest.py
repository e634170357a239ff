"""Fixtures shared by every suite: a real redis-server (``tests/redis_server.py``), a Sentinel set-up and a Redis
Cluster (``tests/redis_topologies.py``)."""

pytest_plugins = ["tests.redis_server", "tests.redis_topologies"]
