# spec: {"op": "ensure_elements", "scope": "", "target": "EXTS", "values": [".pyi"]}
# status: changed
EXTS = (".py",)
# output
EXTS = (".py", ".pyi")
