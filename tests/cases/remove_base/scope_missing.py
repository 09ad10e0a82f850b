# spec: {"op": "remove_base", "scope": "Missing", "value": "Mixin"}
# status: anchor_missing
class Model(Mixin):
    pass
