"""What every layer uses to run work in the background and stop it cleanly; it imports none of them."""

from __future__ import annotations

from lifecycle.tasks import BackgroundTasks, cancel_and_wait

__all__ = ["BackgroundTasks", "cancel_and_wait"]
