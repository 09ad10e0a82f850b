# spec: {"op": "ensure_base", "scope": "Model", "value": "Mixin"}
# status: ambiguous
if TYPE_CHECKING:
    class Model(Base):
        pass
else:
    class Model(Base):
        pass
