# spec: {"op": "ensure_elements", "scope": "route", "containing": ["llama"], "values": ["qwen"]}
# status: ambiguous
def route(arch):
    if arch in ["llama", "mistral"]:
        return "a"
    return arch in {"llama", "phi"}
