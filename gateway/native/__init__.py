"""This gateway's own API family: its realtime socket dialect of ``/v1/audio/speech/stream`` (``docs/realtime.md``)."""
