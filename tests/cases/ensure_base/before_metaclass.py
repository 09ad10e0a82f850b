# spec: {"op": "ensure_base", "scope": "Registry", "value": "mod.Base"}
# status: changed
class Registry(Mapping, metaclass=ABCMeta):
    pass
# output
class Registry(Mapping, mod.Base, metaclass=ABCMeta):
    pass
