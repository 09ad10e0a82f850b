# spec: {"op": "ensure_def", "scope": "Model", "after": "compute_logits", "code": "def aux_layers(self):\n    return (2, 4)\n"}
# status: changed
class Model:
    def forward(self, x):
        return x

    def load_weights(self, weights):
        return set()
# output
class Model:
    def forward(self, x):
        return x

    def load_weights(self, weights):
        return set()

    def aux_layers(self):
        return (2, 4)
