# spec: {"op": "ensure_def", "scope": "Model", "code": "def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n    num_layers = len(self.model.layers)\n    return (2, num_layers // 2, num_layers - 3)\n"}
# status: anchor_missing
class Model:
    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
        return (2,)
