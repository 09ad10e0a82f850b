# spec: {"op": "ensure_elements", "scope": "SpeculativeConfig._verify_args", "target": "eagle3_target_supported", "values": ["kimi_k2", "deepseek_v3"]}
# status: changed
class SpeculativeConfig:
    def _verify_args(self) -> None:
        mt = self.target_model_config.hf_text_config.model_type
        eagle3_target_supported = ["llama", "qwen", "minicpm", "gpt_oss"]
        if self.method == "eagle3" and not any(s in mt for s in eagle3_target_supported):
            raise ValueError(f"eagle3 does not support {mt}")
# output
class SpeculativeConfig:
    def _verify_args(self) -> None:
        mt = self.target_model_config.hf_text_config.model_type
        eagle3_target_supported = ["llama", "qwen", "minicpm", "gpt_oss", "kimi_k2", "deepseek_v3"]
        if self.method == "eagle3" and not any(s in mt for s in eagle3_target_supported):
            raise ValueError(f"eagle3 does not support {mt}")
