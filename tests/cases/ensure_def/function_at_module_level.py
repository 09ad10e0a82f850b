# spec: {"op": "ensure_def", "scope": "", "code": "@lru_cache(maxsize=1)\ndef is_supported(arch: str) -> bool:\n    return arch in SUPPORTED\n"}
# status: changed
"""Registry helpers."""

SUPPORTED = ["llama"]


def lookup(name):
    return SUPPORTED.index(name)
# trailing comment stays last
# output
"""Registry helpers."""

SUPPORTED = ["llama"]


def lookup(name):
    return SUPPORTED.index(name)


@lru_cache(maxsize=1)
def is_supported(arch: str) -> bool:
    return arch in SUPPORTED
# trailing comment stays last
