# spec: {"op": "ensure_elements", "scope": "", "target": "PLUGINS", "values": ["it's", "lora"]}
# status: changed
PLUGINS = ['base', 'tools']
# output
PLUGINS = ['base', 'tools', "it's", 'lora']
