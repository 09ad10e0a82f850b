# spec: {"op": "set_value", "scope": "SchedulerConfig", "target": "limit", "value": 1}
# status: anchor_missing
class SchedulerConfig:
    limit: int
    other = 0

    def f(self):
        limit = 3
