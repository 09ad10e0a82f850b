# spec: {"op": "ensure_elements", "scope": "SpeculativeConfig._verify_args", "target": "eagle3_target_supported", "values": ["kimi_k2", "llama"]}
# status: unchanged
class SpeculativeConfig:
    def _verify_args(self) -> None:
        eagle3_target_supported = [
            'llama',
            "qwen",
            "kimi_k2",  # added downstream
        ]
