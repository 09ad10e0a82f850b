# spec: {"op": "ensure_base", "scope": "Missing", "value": "Mixin"}
# status: anchor_missing
class Model(nn.Module):
    pass
