# spec: {"op": "ensure_elements", "scope": "SpeculativeConfig._verify_args", "target": "eagle3_target_supported", "values": ["kimi_k2", "deepseek_v3"]}
# status: changed
class SpeculativeConfig:
    method: str = "ngram"

    def _verify_args(self) -> None:
        if self.num_tokens < 1:
            raise ValueError("num_tokens must be positive")

        eagle3_target_supported = [
            "llama",
            "qwen",
            "gpt_oss",
        ]
        if (self.method == "eagle3" and not any(s in mt for s in eagle3_target_supported)):
            raise ValueError(f"eagle3 does not support {mt}")
# output
class SpeculativeConfig:
    method: str = "ngram"

    def _verify_args(self) -> None:
        if self.num_tokens < 1:
            raise ValueError("num_tokens must be positive")

        eagle3_target_supported = [
            "llama",
            "qwen",
            "gpt_oss",
            "kimi_k2",
            "deepseek_v3",
        ]
        if (self.method == "eagle3" and not any(s in mt for s in eagle3_target_supported)):
            raise ValueError(f"eagle3 does not support {mt}")
