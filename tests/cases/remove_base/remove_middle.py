# spec: {"op": "remove_base", "scope": "LlamaForCausalLM", "value": "SupportsLoRA"}
# status: changed
class LlamaForCausalLM(nn.Module, SupportsLoRA, SupportsPP):
    pass
# output
class LlamaForCausalLM(nn.Module, SupportsPP):
    pass
