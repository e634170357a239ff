"""This gateway's own API family: its realtime socket dialect of ``/v1/audio/speech/stream`` (``docs/realtime.md``)
and its speech jobs, ``/v1/audio/speech/jobs`` (``docs/jobs.md``)."""
