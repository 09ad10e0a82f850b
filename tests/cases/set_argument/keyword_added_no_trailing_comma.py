# spec: {"op": "set_argument", "scope": "build", "call": "Engine", "arg": "enable_eagle", "value": true}
# status: changed
def build(cfg):
    return Engine(
        cfg,
        tp=2
    )
# output
def build(cfg):
    return Engine(
        cfg,
        tp=2,
        enable_eagle=True
    )
