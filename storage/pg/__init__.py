"""The team database on PostgreSQL (pgvector): its store, schema, connections, statements and search."""
