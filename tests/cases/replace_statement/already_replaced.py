# spec: {"op": "replace_statement", "scope": "SpeculativeConfig._verify_args", "match": "mt = self.model_type", "code": "mt = self.hf_config.model_type"}
# status: unchanged
class SpeculativeConfig:
    def _verify_args(self) -> None:
        mt = self.hf_config.model_type
        return mt
