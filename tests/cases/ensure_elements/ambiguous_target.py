# spec: {"op": "ensure_elements", "scope": "pick", "target": "backends", "values": ["rocm"]}
# status: ambiguous
def pick(platform):
    if platform == "linux":
        backends = ["cuda", "cpu"]
    else:
        backends = ["cpu"]
    return backends
