# spec: {"op": "ensure_elements", "scope": "", "target": "EXTS", "values": [".py"]}
# status: changed
EXTS = ()
# output
EXTS = (".py",)
