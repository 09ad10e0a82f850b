# spec: {"op": "insert_statement", "scope": "SpeculativeConfig._verify_args", "match": "eagle3_target_supported = [\"llama\", \"qwen\", \"gpt_oss\"]", "code": "eagle3_target_supported += [\"kimi_k2\", \"deepseek_v3\"]  # downstream models"}
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
        mt = self.model_type
        eagle3_target_supported = [
            "llama",
            "qwen",
            "gpt_oss",
        ]
        eagle3_target_supported += ["kimi_k2", "deepseek_v3"]  # downstream models
        if (self.method == "eagle3" and not any(s in mt for s in eagle3_target_supported)):
            raise ValueError(f"eagle3 does not support {mt}")
