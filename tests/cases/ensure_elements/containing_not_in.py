# spec: {"op": "ensure_elements", "scope": "check", "containing": ["fp8"], "values": ["fp4"]}
# status: changed
def check(dtype):
    if dtype not in ("fp8", "int8"):
        raise ValueError(dtype)
# output
def check(dtype):
    if dtype not in ("fp8", "int8", "fp4"):
        raise ValueError(dtype)
