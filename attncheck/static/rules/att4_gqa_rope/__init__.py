"""ATT4xx: grouped-query attention and rotary position embeddings."""
