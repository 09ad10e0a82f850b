# spec: {"op": "ensure_base", "scope": "Model", "value": "interfaces.SupportsEagle3"}
# status: unchanged
class Model(nn.Module, interfaces . SupportsEagle3):
    pass
