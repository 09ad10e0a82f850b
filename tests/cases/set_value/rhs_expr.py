# spec: {"op": "set_value", "scope": "SpeculativeConfig._verify_args", "target": "mt", "expr": "self.target_model_config.hf_config.model_type"}
# status: changed
class SpeculativeConfig:
    def _verify_args(self) -> None:
        mt = self.target_model_config.hf_text_config.model_type
        if not any(s in mt for s in ("llama", "qwen")):
            raise ValueError(mt)
# output
class SpeculativeConfig:
    def _verify_args(self) -> None:
        mt = self.target_model_config.hf_config.model_type
        if not any(s in mt for s in ("llama", "qwen")):
            raise ValueError(mt)
