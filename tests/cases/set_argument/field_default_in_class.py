# spec: {"op": "set_argument", "scope": "SpeculativeConfig", "call": "Field", "arg": "default", "value": 4}
# status: changed
class SpeculativeConfig(BaseModel):
    num_speculative_tokens: int = Field(default=1, ge=1, description="draft length")
    method: str = "eagle"
# output
class SpeculativeConfig(BaseModel):
    num_speculative_tokens: int = Field(default=4, ge=1, description="draft length")
    method: str = "eagle"
