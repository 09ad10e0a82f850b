# spec: {"op": "ensure_base", "scope": "LlamaForCausalLM", "value": "SupportsEagle3"}
# status: changed
class LlamaForCausalLM(nn.Module, SupportsLoRA, SupportsPP):
    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
# output
class LlamaForCausalLM(nn.Module, SupportsLoRA, SupportsPP, SupportsEagle3):
    packed_modules_mapping = {"qkv_proj": ["q_proj", "k_proj", "v_proj"]}
