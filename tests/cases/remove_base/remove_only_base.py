# spec: {"op": "remove_base", "scope": "Plain", "value": "Mixin"}
# status: changed
class Plain(Mixin):
    x = 1
# output
class Plain:
    x = 1
