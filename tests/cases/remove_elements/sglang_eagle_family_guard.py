# spec: {"op": "remove_elements", "scope": "_handle_eagle_family", "containing": ["DeepseekV32ForCausalLM"], "values": ["MiniMaxM2ForCausalLM"]}
# status: changed
def _handle_eagle_family(server_args):
    """Pick the draft settings for EAGLE-family speculative decoding."""
    if server_args.speculative_algorithm not in ("EAGLE", "EAGLE3"):
        return
    model_arch = server_args.architectures[0]
    if model_arch in [
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLM",
        "Glm4MoeForCausalLM",
        # drafts share the target's embedding
        "MiniMaxM2ForCausalLM",
    ]:
        server_args.speculative_num_steps = 1
# output
def _handle_eagle_family(server_args):
    """Pick the draft settings for EAGLE-family speculative decoding."""
    if server_args.speculative_algorithm not in ("EAGLE", "EAGLE3"):
        return
    model_arch = server_args.architectures[0]
    if model_arch in [
        "DeepseekV32ForCausalLM",
        "DeepseekV3ForCausalLM",
        "Glm4MoeForCausalLM",
        # drafts share the target's embedding
    ]:
        server_args.speculative_num_steps = 1
