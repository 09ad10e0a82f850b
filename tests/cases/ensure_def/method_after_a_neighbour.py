# spec: {"op": "ensure_def", "scope": "DeepseekV2ForCausalLM", "after": "__init__", "code": "def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:\n    self.model.aux_hidden_state_layers = layers\n"}
# status: changed
class DeepseekV2ForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = DeepseekV2Model(config)

    def embed_input_ids(self, input_ids):
        return self.model.embed_input_ids(input_ids)
# output
class DeepseekV2ForCausalLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.model = DeepseekV2Model(config)

    def set_aux_hidden_state_layers(self, layers: tuple[int, ...]) -> None:
        self.model.aux_hidden_state_layers = layers

    def embed_input_ids(self, input_ids):
        return self.model.embed_input_ids(input_ids)
