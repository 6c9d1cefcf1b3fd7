"""Clients of running SGLang and vLLM servers: detect the engine, read its speculative
settings and counters, stream requests and time them, and run interleaved A/B benches
(`eagle3kit bench --url`); capture hidden states through vLLM (`data capture --engine`).
Stdlib HTTP only for the clients."""
