# spec: {"op": "ensure_base", "scope": "Plain", "value": "Mixin"}
# status: changed
class Plain:
    x = 1
# output
class Plain(Mixin):
    x = 1
