"""Placeholder replaced below."""
def estimate_cycles(layers):
    return 0
