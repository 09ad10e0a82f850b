# spec: {"op": "remove_base", "scope": "Model", "value": "SupportsEagle3"}
# status: changed
class Model(
    nn.Module,
    SupportsEagle3
):
    pass
# output
class Model(
    nn.Module
):
    pass
