# spec: {"op": "remove_base", "scope": "Model", "value": "SupportsEagle3"}
# status: unchanged
class Model(nn.Module):
    pass
