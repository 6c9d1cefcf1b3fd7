"""Models: the target (a Hugging Face causal LM with aux hidden-state capture) and the drafter."""
