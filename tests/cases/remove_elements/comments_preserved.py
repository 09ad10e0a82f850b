# spec: {"op": "remove_elements", "scope": "Quantization", "target": "methods", "values": ["marlin"]}
# status: changed
class Quantization:
    methods = [  # keep sorted
        "gptq",  # 4-bit
        # the fast path:
        "marlin",  # needs sm80
        "fp8",
    ]  # end of methods
# output
class Quantization:
    methods = [  # keep sorted
        "gptq",  # 4-bit
        # the fast path:
        "fp8",
    ]  # end of methods
