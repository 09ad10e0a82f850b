# spec: {"op": "set_value", "scope": "SchedulerConfig", "target": "policy", "value": "priority"}
# status: unchanged
class SchedulerConfig:
    policy = ('priority')
