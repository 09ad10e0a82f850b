# spec: {"op": "set_argument", "scope": "get_config", "call": "lru_cache", "arg": "maxsize", "value": 128}
# status: anchor_missing
@functools.lru_cache(maxsize=None)
def get_config(name):
    return name
