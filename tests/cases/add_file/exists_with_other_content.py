# spec: {"op": "add_file", "file": "servekit/aux.py", "text": "\"\"\"Aux hidden states for EAGLE-3 drafters.\"\"\"\n\nAUX_LAYERS = (2, 16, 29)\n"}
# status: anchor_missing
AUX_LAYERS = ()
