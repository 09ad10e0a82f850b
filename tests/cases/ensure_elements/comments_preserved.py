# spec: {"op": "ensure_elements", "scope": "Quantization", "target": "methods", "values": ["fp8", "awq"]}
# status: changed
class Quantization:
    # Methods the kernels support.
    methods = [  # keep sorted
        "gptq",  # 4-bit
        "marlin",
        # "squeezellm",  (removed upstream)
    ]  # end of methods
# output
class Quantization:
    # Methods the kernels support.
    methods = [  # keep sorted
        "gptq",  # 4-bit
        "marlin",
        # "squeezellm",  (removed upstream)
        "fp8",
        "awq",
    ]  # end of methods
