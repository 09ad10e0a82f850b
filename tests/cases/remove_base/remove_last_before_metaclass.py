# spec: {"op": "remove_base", "scope": "Registry", "value": "Mapping"}
# status: changed
class Registry(Base, Mapping, metaclass=ABCMeta):
    pass
# output
class Registry(Base, metaclass=ABCMeta):
    pass
