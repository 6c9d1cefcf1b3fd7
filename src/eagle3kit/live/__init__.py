"""Clients of running SGLang/vLLM servers: engine capture of hidden states, live checks."""
