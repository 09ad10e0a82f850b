# spec: {"op": "set_argument", "scope": "Config", "call": "Field", "arg": "default", "value": 0}
# status: ambiguous
class Config(BaseModel):
    a: int = Field(default=1)
    b: int = Field(default=2)
