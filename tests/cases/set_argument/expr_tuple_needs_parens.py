# spec: {"op": "set_argument", "scope": "", "call": "register", "arg": "archs", "expr": "'A', 'B'"}
# status: invalid
register(name="x")
