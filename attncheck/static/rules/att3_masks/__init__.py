"""ATT3xx: masks: how they are applied, with what fill, which positions they keep, the causal diagonal."""
