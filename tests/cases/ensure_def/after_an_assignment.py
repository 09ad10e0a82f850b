# spec: {"op": "ensure_def", "scope": "Model", "after": "packed_modules_mapping", "code": "def aux_layers(self):\n    return (2, 4)\n"}
# status: changed
class Model:
    packed_modules_mapping = {"gate_up_proj": ["gate_proj", "up_proj"]}
    fall_back_to_pt = False
# output
class Model:
    packed_modules_mapping = {"gate_up_proj": ["gate_proj", "up_proj"]}

    def aux_layers(self):
        return (2, 4)

    fall_back_to_pt = False
