"""Model backends behind one contract (`base.ModelBackend`); pick one by name with `base.load_backend`."""
