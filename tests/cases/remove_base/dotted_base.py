# spec: {"op": "remove_base", "scope": "Model", "value": "interfaces.SupportsEagle3"}
# status: changed
class Model(nn.Module, interfaces.SupportsEagle3):  # the base list
    pass
# output
class Model(nn.Module):  # the base list
    pass
