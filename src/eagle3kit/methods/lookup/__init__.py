"""Prompt lookup (vLLM `ngram`, SGLang `NGRAM`): drafts copied from the context by n-gram
match, no drafter; its one part is decode (the loop that drafts, verifies and accepts)."""
