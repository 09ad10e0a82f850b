# spec: {"op": "ensure_elements", "scope": "check", "containing": ["bf16"], "values": ["fp4"]}
# status: anchor_missing
def check(dtype):
    if dtype not in ("fp8", "int8"):
        raise ValueError(dtype)
