# spec: {"op": "replace_statement", "scope": "SpeculativeConfig._verify_args", "match": "if self.method == \"eagle3\" and not any(s in mt for s in eagle3_target_supported):\n    raise ValueError(f\"eagle3 is only supported for {eagle3_target_supported}, got {mt}\")", "code": "if self.method == \"eagle3\" and not any(s in mt for s in eagle3_target_supported):\n    logger.warning(\"eagle3 untested for %s\", mt)"}
# status: changed
class SpeculativeConfig:
    def _verify_args(self) -> None:
        mt = self.model_type
        eagle3_target_supported = ["llama", "qwen", "gpt_oss"]
        # Only some targets have an eagle3 head.
        if (self.method == "eagle3" and not any(s in mt for s in eagle3_target_supported)):
            raise ValueError(
                f"eagle3 is only supported for {eagle3_target_supported}, got {mt}"
            )
        return None
# output
class SpeculativeConfig:
    def _verify_args(self) -> None:
        mt = self.model_type
        eagle3_target_supported = ["llama", "qwen", "gpt_oss"]
        # Only some targets have an eagle3 head.
        if self.method == "eagle3" and not any(s in mt for s in eagle3_target_supported):
            logger.warning("eagle3 untested for %s", mt)
        return None
