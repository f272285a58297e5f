"""InfiniPot-V harness: continual KV-cache compression and KIVI storage for streaming video understanding.

Layout: ``stream`` (the session), ``compress`` (policies), ``kv`` (stores, cache, byte accounting), ``models``
(adapters), ``data`` (benchmarks, video), ``results`` (tables), ``job`` (one evaluation run).
"""
