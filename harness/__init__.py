"""What drives the gateway from outside, for the tests and the benchmarks alike: real ``chattts-gateway serve``
processes (``gateway_process``) and recordings to send them (``recordings``). Nothing in ``gateway``, ``engines``,
``auth`` or ``storage`` imports it, and it imports nothing from ``tests`` or ``bench``."""
