# spec: {"op": "remove_elements", "scope": "", "target": "EXTS", "values": [".pyi"]}
# status: changed
EXTS = (".py", ".pyi")
# output
EXTS = (".py",)
