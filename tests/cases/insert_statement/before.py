# spec: {"op": "insert_statement", "scope": "SpeculativeConfig._verify_args", "match": "mt = self.model_type", "code": "# Normalise first.\nself.model_type = self.model_type.lower()", "position": "before"}
# status: changed
class SpeculativeConfig:
    def _verify_args(self) -> None:
        mt = self.model_type
        eagle3_target_supported = [
            "llama",
            "qwen",
            "gpt_oss",
        ]
        if (self.method == "eagle3" and not any(s in mt for s in eagle3_target_supported)):
            raise ValueError(f"eagle3 does not support {mt}")
# output
class SpeculativeConfig:
    def _verify_args(self) -> None:
        # Normalise first.
        self.model_type = self.model_type.lower()
        mt = self.model_type
        eagle3_target_supported = [
            "llama",
            "qwen",
            "gpt_oss",
        ]
        if (self.method == "eagle3" and not any(s in mt for s in eagle3_target_supported)):
            raise ValueError(f"eagle3 does not support {mt}")
