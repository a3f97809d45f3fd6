"""The vector index: hnswlib owned by one actor."""
