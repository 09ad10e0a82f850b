"""What a serving engine's metrics say, pure: the one counter model (per engine and release:
vLLM, SGLang), histogram quantiles from bucket deltas, the statistics a gate decides with,
and the gate table (GATES) that `vpatch rollout` judges by. No I/O here: the rollout's
executor scrapes and hands the text in."""
