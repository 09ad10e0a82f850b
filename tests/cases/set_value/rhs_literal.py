# spec: {"op": "set_value", "scope": "SchedulerConfig", "target": "max_num_seqs", "value": 512}
# status: changed
class SchedulerConfig:
    # How many sequences run at once.
    max_num_seqs: int = 256  # tuned for A100
    policy = "fcfs"
# output
class SchedulerConfig:
    # How many sequences run at once.
    max_num_seqs: int = 512  # tuned for A100
    policy = "fcfs"
