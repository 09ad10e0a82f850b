# spec: {"op": "remove_statement", "scope": "", "match": "warnings.simplefilter('ignore')"}
# status: changed
import warnings

# --- noisy third-party code ---

# silence everything
warnings.simplefilter("ignore")

run()
# output
import warnings

# --- noisy third-party code ---

run()
