# spec: {"op": "ensure_def", "scope": "Model", "code": "def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n    num_layers = len(self.model.layers)\n    return (2, num_layers // 2, num_layers - 3)\n", "replace": true}
# status: changed
class Model:
    x = 1

    # Layers whose hidden states feed the EAGLE-3 draft.
    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
        return (2,)

    def other(self):
        pass
# output
class Model:
    x = 1

    # Layers whose hidden states feed the EAGLE-3 draft.
    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
        num_layers = len(self.model.layers)
        return (2, num_layers // 2, num_layers - 3)

    def other(self):
        pass
