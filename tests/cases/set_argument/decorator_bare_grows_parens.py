# spec: {"op": "set_argument", "scope": "get_config", "call": "functools.lru_cache", "arg": "maxsize", "value": 32}
# status: changed
@functools.lru_cache
def get_config(name: str) -> dict:
    return load(name)
# output
@functools.lru_cache(maxsize=32)
def get_config(name: str) -> dict:
    return load(name)
