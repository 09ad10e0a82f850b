# spec: {"op": "ensure_def", "scope": "LlamaForCausalLM", "code": "def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:\n    num_layers = len(self.model.layers)\n    return (2, num_layers // 2, num_layers - 3)\n"}
# status: changed
class LlamaForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = LlamaModel(config)

    def forward(self, input_ids):
        return self.model(input_ids)


def helper():
    return 1
# output
class LlamaForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = LlamaModel(config)

    def forward(self, input_ids):
        return self.model(input_ids)

    def get_eagle3_aux_hidden_state_layers(self) -> tuple[int, ...]:
        num_layers = len(self.model.layers)
        return (2, num_layers // 2, num_layers - 3)


def helper():
    return 1
