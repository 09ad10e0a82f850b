# spec: {"op": "set_value", "scope": "SchedulerConfig.validate", "target": "limit", "value": 1}
# status: anchor_missing
class SchedulerConfig:
    limit = 0
