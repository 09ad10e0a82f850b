# spec: {"op": "set_argument", "scope": "get_config", "call": "lru_cache", "arg": "maxsize", "value": 128}
# status: changed
@lru_cache(maxsize=None)
def get_config(name: str) -> dict:
    return load(name)
# output
@lru_cache(maxsize=128)
def get_config(name: str) -> dict:
    return load(name)
