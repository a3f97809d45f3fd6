"""The vector index: HNSW graphs (voyager) owned by one actor."""
