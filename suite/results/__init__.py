"""Result records (schema.py), run folders written (store.py) and read (reader.py), provenance (env.py)."""
