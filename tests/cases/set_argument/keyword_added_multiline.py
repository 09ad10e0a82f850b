# spec: {"op": "set_argument", "scope": "", "call": "parser.add_argument", "arg": "default", "expr": "os.environ.get('SPEC_BACKEND', 'triton')"}
# status: changed
parser.add_argument(
    "--speculative-attention-backend",
    choices=BACKENDS,
)
# output
parser.add_argument(
    "--speculative-attention-backend",
    choices=BACKENDS,
    default=os.environ.get('SPEC_BACKEND', 'triton'),
)
