"""Result records (schema.py), run folders (store.py) and provenance (env.py)."""
