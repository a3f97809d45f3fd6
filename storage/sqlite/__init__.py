"""The local store on SQLite (APSW): the facade, each of its jobs, its connections and schema."""
