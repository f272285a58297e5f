"""The streaming session: frames in, the memory shaped by a streaming method, questions answered on a view of it.

The streaming methods register here (``infinipotv.stream.method.STREAMING``): importing the package makes every
``streaming`` kind a registered policy may name available to the session.
"""

from infinipotv.stream import (  # noqa: F401  (registers the streaming methods)
    method,
    mukv,
    retrieval,
    streamingtom,
    streamingvlm,
    streamkv,
    streammem,
    weavetime,
)
