"""`eagle3kit demo`: the user's whole story, offline, on built-in data.

Prologue (prologue.py): the Kimi-K2 -> K2.5 situation as it was (the seed's measurements; the
real drafters' headers as sparse files, so nothing is downloaded): plan, inspect, compat.

Then the same story replayed for real on the zoo's DeepSeek-V3-architecture pair (story.py;
v1 = "K2", v2 = "K2.5": same shapes and tokenizer, weights moved by further training on
shifted data):

 1. load both targets and "the K2 drafter" (an EAGLE-3 drafter trained on v1), all shipped
    in the package (zoo/shipped): the demo builds no target (steps.py);
 2. bench plain vs speculative decoding on v2 with that stale drafter;
 3. plan from those measurements; inspect and compat the drafter against v2; probe it;
 4. fine-tune it on v2 data, and train one from scratch on the same data and steps;
 5. eval (offline, the same held-out v2 samples) and bench both; write the report.

Each step is the library call behind the CLI verb it names. Conversations are the standard
library's own functions (user: "write `name` from `module`"; assistant: its source); a real
run would regenerate the answers with the target (`eagle3kit data regenerate`) first.
"""

from eagle3kit.demo.steps import PAIR, RECIPES, Recipe, default_out, k2_drafter
from eagle3kit.demo.story import run_demo

__all__ = ["PAIR", "RECIPES", "Recipe", "default_out", "k2_drafter", "run_demo"]
