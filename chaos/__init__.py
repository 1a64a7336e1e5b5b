"""Chaos harness: a simulated vLLM, a load generator, fault injection and scenarios."""
