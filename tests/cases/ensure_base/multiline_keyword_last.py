# spec: {"op": "ensure_base", "scope": "Model", "value": "SupportsEagle3"}
# status: changed
class Model(
    nn.Module,
    metaclass=Meta,
):
    pass
# output
class Model(
    nn.Module,
    SupportsEagle3,
    metaclass=Meta,
):
    pass
