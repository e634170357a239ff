"""vLLM-Omni's API family: its streaming-text speech socket, as a dialect of the realtime session
(``docs/realtime.md``)."""
