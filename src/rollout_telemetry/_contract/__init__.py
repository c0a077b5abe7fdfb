"""The outcome contract: what a verify response carries, the disposition it ends in, and the checks of
every field and identity."""
