"""The recording proxy of ``kvreplay record``: a transparent HTTP proxy that retains the bodies it forwards.

``RecordingProxy`` (``_proxy``) is an aiohttp server in front of an upstream inference
server: every request goes upstream with its exact bytes and every answer comes back as
it arrives (``_relay``: each upstream read written to the client and fed to the SSE
accountant), while the bodies of the recorded paths are written to a capture folder
(``kvreplay.workload.capture``). A body read whole goes upstream on the runner's llhttp
connections (``kvreplay.runner.h1relay``), others on aiohttp's client.

``kvreplay.api.recording`` (``kvreplay record`` / ``kvreplay.record``) runs it. Layer: beside
the runner, whose client it uses; below ``api``.
"""

from kvreplay.recorder._proxy import RecordingProxy

__all__ = ["RecordingProxy"]
