# spec: {"op": "remove_elements", "scope": "SpeculativeConfig._verify_args", "target": "eagle3_target_supported", "values": ["minicpm", "qwen"]}
# status: changed
class SpeculativeConfig:
    def _verify_args(self) -> None:
        eagle3_target_supported = ["llama", "qwen", "minicpm", "gpt_oss"]
# output
class SpeculativeConfig:
    def _verify_args(self) -> None:
        eagle3_target_supported = ["llama", "gpt_oss"]
