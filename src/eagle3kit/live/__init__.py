"""Clients of running SGLang and vLLM servers: detect the engine, read its speculative
settings and counters, stream requests and time them, and run interleaved A/B benches
(`eagle3kit bench --url`). Stdlib HTTP only; torch-free."""
