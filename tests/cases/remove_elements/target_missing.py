# spec: {"op": "remove_elements", "scope": "SpeculativeConfig._verify_args", "target": "eagle_supported", "values": ["qwen"]}
# status: anchor_missing
class SpeculativeConfig:
    def _verify_args(self) -> None:
        eagle3_target_supported = [
            "llama",
            "qwen",
            "gpt_oss",
        ]
        if (self.method == "eagle3" and not any(s in mt for s in eagle3_target_supported)):
            raise ValueError(f"eagle3 does not support {mt}")
