# spec: {"op": "ensure_base", "scope": "Model", "value": "Base"}
# status: changed
class Model(metaclass=Meta):
    pass
# output
class Model(Base, metaclass=Meta):
    pass
