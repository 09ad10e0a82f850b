# spec: {"op": "remove_elements", "scope": "Quantization", "target": "methods", "values": ["fp8"]}
# status: changed
class Quantization:
    methods = [
        "gptq",  # 4-bit
        "fp8",  # hopper only
        # more to come
    ]
# output
class Quantization:
    methods = [
        "gptq",  # 4-bit
        # more to come
    ]
