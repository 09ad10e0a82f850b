# spec: {"op": "remove_base", "scope": "Model", "value": "Mixin"}
# status: ambiguous
try:
    class Model(Mixin):
        pass
except ImportError:
    class Model(Mixin):
        pass
