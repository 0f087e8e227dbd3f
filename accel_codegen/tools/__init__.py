"""Tools: the model zoo, the estimation front end, bench, sweep and the command line."""
