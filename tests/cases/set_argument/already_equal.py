# spec: {"op": "set_argument", "scope": "get_config", "call": "lru_cache", "arg": "maxsize", "value": 128}
# status: unchanged
@lru_cache(maxsize=(128))
def get_config(name):
    return name
