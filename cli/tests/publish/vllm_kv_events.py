"""vLLM's own `vllm/distributed/kv_events.py`, loaded from the pinned vLLM wheel.

The module's text is read from the wheel (cli/tests/publish/vllm-wheel.txt pins it by
sha256) and run unchanged; only its `vllm.*` imports are stubbed, since the rest of
vLLM needs a GPU build: a logger, three network helpers it calls only to bind
`tcp://*:0` (which no test does), a config class that keeps the keywords its
publisher records, and the block hash type. Both the decoder of `kvroute publish`'s
messages (vllm_subscriber.py) and the test publisher of `kvroute record`
(engine_events/engines.py) use it, so both speak the same vLLM.
"""

import logging
import sys
import types
import zipfile


def load_kv_events(wheel):
    """The module, its classes (`ZmqEventPublisher`, `KVEventBatch`, `BlockStored`,
    ...) as the wheel declares them."""
    with zipfile.ZipFile(wheel) as archive:
        source = archive.read("vllm/distributed/kv_events.py").decode()
    stubs = {
        "vllm": {},
        "vllm.config": {},
        # ZmqEventPublisher builds one from its arguments, to report its settings.
        "vllm.config.kv_events": {"KVEventsConfig": types.SimpleNamespace},
        "vllm.logger": {"init_logger": logging.getLogger},
        "vllm.utils": {},
        "vllm.utils.network_utils": {
            name: (lambda *a, **k: None)
            for name in ("get_ip", "get_tcp_uri", "is_valid_ipv6_address", "split_zmq_path")
        },
        "vllm.v1": {},
        "vllm.v1.core": {},
        "vllm.v1.core.kv_cache_utils": {"ExternalBlockHash": bytes | int},
    }
    for name, members in stubs.items():
        module = types.ModuleType(name)
        module.__dict__.update(members)
        sys.modules[name] = module
    module = types.ModuleType("vllm_kv_events")
    exec(compile(source, "vllm/distributed/kv_events.py", "exec"), module.__dict__)
    return module
