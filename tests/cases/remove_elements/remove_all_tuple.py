# spec: {"op": "remove_elements", "scope": "", "target": "EXTS", "values": [".py"]}
# status: changed
EXTS = (".py",)
# output
EXTS = ()
